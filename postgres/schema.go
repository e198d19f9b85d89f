package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock/backend"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// sqlOrder is the order the migration runs the files in: the tables first,
// then the functions, each after those it calls.
var sqlOrder = []string{"schema.sql", "delay.sql", "promote.sql", "acquire.sql", "renew.sql", "release.sql", "revoke.sql", "inspect.sql"}

// maxPrefix is the longest prefix: the longest name made of it,
// "<prefix>_waiters_order", and the notification channel
// "<prefix>:<16 hex digits>" stay within PostgreSQL's 63-byte identifiers.
const maxPrefix = 40

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// checkPrefix reports why prefix cannot start the adapter's SQL names.
func checkPrefix(prefix string) error {
	if len(prefix) > maxPrefix || !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%w: postgres: prefix %q must be a lower-case SQL identifier ([a-z_][a-z0-9_]*) of at most %d bytes",
			backend.ErrInvalidOption, prefix, maxPrefix)
	}
	return nil
}

// Schema returns the migration SQL for prefix (empty: DefaultPrefix): the
// tables, sequences and functions the adapter uses, in one transaction
// (BEGIN ... COMMIT), for users who run their migrations themselves (then
// set Config.NoMigrate, or migrate=false in a URL). It is idempotent, and
// serialized by a transaction-scoped advisory lock so that two processes
// migrating at once do not fail. A migration tool that wraps each
// migration in a transaction of its own can take the text between the
// first line (BEGIN;) and the last (COMMIT;): the statements need only be
// in one transaction, and SET LOCAL and the advisory lock last until its
// end.
//
// Its lock_timeout is 5s: should a table lock it needs wait behind a long
// transaction (a fenced write holding a lock row FOR SHARE), it fails
// rather than queue every lock operation of the prefix behind it. Over a
// database whose schema version is later than SchemaVersion it fails
// with SQLSTATE ZF002 and changes nothing.
func Schema(prefix string) (string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("BEGIN;\n\n")
	fmt.Fprintf(&b, "SET LOCAL lock_timeout = '%s';\n\n", migrateLockTimeout)
	fmt.Fprintf(&b, "SELECT pg_advisory_xact_lock(%d, hashtext('%s'));\n\n", migrateLockKey, prefix)
	// Checked under the advisory lock: a later version's migration that
	// ran since Migrate read the version is not undone.
	fmt.Fprintf(&b, `DO $$
DECLARE
  c text := obj_description(to_regclass('%[1]s_locks'), 'pg_class');
BEGIN
  IF c ~ '^%[2]s[0-9]{1,9}$' AND substring(c FROM '[0-9]+$')::int > %[3]d THEN
    RAISE EXCEPTION USING ERRCODE = '%[4]s',
      MESSAGE = 'fencelock: the schema of prefix %[1]s is ' || c || ', later than this migration''s %[3]d: left as it is';
  END IF;
END $$;

`, prefix, versionComment, SchemaVersion, codeNewerSchema)
	b.WriteString(schemaBody(prefix))
	fmt.Fprintf(&b, "COMMENT ON TABLE %s_locks IS '%s%d';\n\nCOMMIT;\n", prefix, versionComment, SchemaVersion)
	return b.String(), nil
}

// SchemaVersion is the version of the schema this package migrates to,
// written as the comment of the locks table ("fencelock schema version
// 1"). A Locker migrates only a database whose version is lower (or that
// has no schema), and uses a later one as it is: a later version keeps the
// functions of every earlier one (p_acquire_v1, ...) working as they were,
// so that processes of both versions can run side by side during a rolling
// deploy or a rollback. A change of the functions' semantics is a new
// function (_v2) in a new version; the body of a released function is
// never changed. The adapter is not released yet: its current functions
// are _v1, in version 2, which gave their grants the clock floor (see
// the package doc's Tokens): a version-1 database is migrated to it, and a
// process of version 1 over a version-2 database calls the new bodies,
// whose arguments and results are those it knows. Version 3 added the
// lock-delay (p_delay_v1, read from the owner id, which the _v1 bodies now
// honour), with the same arguments and results.
const SchemaVersion = 3

// versionComment starts the comment of the locks table, the version
// following it.
const versionComment = "fencelock schema version "

// codeNewerSchema is the SQLSTATE of the migration's refusal to run over a
// later schema version.
const codeNewerSchema = "ZF002"

// migrateLockTimeout is the migration's lock_timeout.
const migrateLockTimeout = 5 * time.Second

// migrateLockKey is the first key of the migration's advisory lock
// ("fenc"), the second being the prefix's hash.
const migrateLockKey = 0x66656e63

// schemaBody returns the schema and functions for prefix.
func schemaBody(prefix string) string {
	var b strings.Builder
	for _, f := range sqlOrder {
		src, err := sqlFiles.ReadFile("sql/" + f)
		if err != nil {
			panic("postgres: embedded " + f + ": " + err.Error())
		}
		b.WriteString(strings.ReplaceAll(string(src), "{p}", prefix))
		b.WriteString("\n")
	}
	return b.String()
}

// Migrate creates or updates the adapter's tables and functions for prefix
// (empty: DefaultPrefix) through client, unless its schema version is
// SchemaVersion or later (one read). A Locker does it on its first use
// unless Config.NoMigrate is set; call Migrate from a deployment step
// instead when the Lockers' user may not create tables. When the
// migration waits more than 5s for a lock (a long transaction on the
// locks table, see Schema), it fails with backend.ErrUnavailable, having
// changed nothing; the Locker tries again at its next call.
func Migrate(ctx context.Context, client Client, prefix string) error {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if client == nil {
		return fmt.Errorf("%w: postgres: nil client", backend.ErrInvalidOption)
	}
	script, err := Schema(prefix)
	if err != nil {
		return err
	}
	current, err := schemaCurrent(ctx, client, prefix)
	if err != nil || current {
		return err
	}
	// No arguments: pgx sends it with the simple protocol, all the
	// statements in one message, which a transaction-mode pooler passes
	// to one server connection.
	_, err = client.Exec(ctx, script)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe) && pe.Code == codeNewerSchema:
		return nil // a later version migrated meanwhile
	case errors.As(err, &pe) && pe.Code == "55P03":
		return fmt.Errorf("postgres: migrate (prefix %s): a lock it needs was held for more than %s (a long transaction on the adapter's tables, or another migration), so it gave up rather than hold up every lock: %w",
			prefix, migrateLockTimeout, mapErr(err))
	}
	return fmt.Errorf("postgres: migrate (prefix %s): %w", prefix, mapErr(err))
}

// schemaCurrent reports whether the schema version of prefix is
// SchemaVersion or later: a comment of another form (none, or an earlier
// development's) is version 0.
func schemaCurrent(ctx context.Context, client Client, prefix string) (bool, error) {
	var comment *string
	err := client.QueryRow(ctx, "SELECT obj_description(to_regclass($1), 'pg_class')", pgx.QueryExecModeExec,
		prefix+"_locks").Scan(&comment)
	if err != nil {
		return false, fmt.Errorf("postgres: read the schema version (prefix %s): %w", prefix, mapErr(err))
	}
	return comment != nil && parseVersion(*comment) >= SchemaVersion, nil
}

// parseVersion returns the schema version a comment of the locks table
// names, or 0.
func parseVersion(comment string) int {
	digits, ok := strings.CutPrefix(comment, versionComment)
	if !ok || len(digits) > 9 {
		return 0
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < 0 || strconv.Itoa(v) != digits {
		return 0
	}
	return v
}

// errNoSchema explains an undefined table or function when the Locker does
// not migrate.
var errNoSchema = errors.New("the adapter's tables or functions are missing or out of date: run postgres.Migrate (or the SQL of postgres.Schema), or let the Locker migrate (leave Config.NoMigrate false, migrate=true)")
