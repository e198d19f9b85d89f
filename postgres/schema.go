package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/backend"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// sqlOrder is the order the migration runs the files in: the tables first,
// then the functions, each after those it calls.
var sqlOrder = []string{"schema.sql", "promote.sql", "acquire.sql", "renew.sql", "release.sql", "revoke.sql", "inspect.sql"}

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
// tables, sequences and functions the adapter uses, in one transaction,
// for users who run their migrations themselves (then set
// Config.NoMigrate, or migrate=false in a URL). It is idempotent, and
// serialized by a transaction-scoped advisory lock so that two processes
// migrating at once do not fail.
func Schema(prefix string) (string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return "", err
	}
	body, version := schemaBody(prefix)
	var b strings.Builder
	b.WriteString("BEGIN;\n\n")
	fmt.Fprintf(&b, "SELECT pg_advisory_xact_lock(%d, hashtext('%s'));\n\n", migrateLockKey, prefix)
	b.WriteString(body)
	fmt.Fprintf(&b, "COMMENT ON TABLE %s_locks IS '%s';\n\nCOMMIT;\n", prefix, version)
	return b.String(), nil
}

// migrateLockKey is the first key of the migration's advisory lock
// ("fenc"), the second being the prefix's hash.
const migrateLockKey = 0x66656e63

// schemaBody returns the schema and functions for prefix, and the version
// the migration writes as the comment of the locks table: a hash of them,
// so that a Locker finds the schema current with one read.
func schemaBody(prefix string) (body, version string) {
	var b strings.Builder
	for _, f := range sqlOrder {
		src, err := sqlFiles.ReadFile("sql/" + f)
		if err != nil {
			panic("postgres: embedded " + f + ": " + err.Error())
		}
		b.WriteString(strings.ReplaceAll(string(src), "{p}", prefix))
		b.WriteString("\n")
	}
	sum := sha256.Sum256([]byte(b.String()))
	return b.String(), "fencelock schema " + hex.EncodeToString(sum[:8])
}

// Migrate creates or updates the adapter's tables and functions for prefix
// (empty: DefaultPrefix) through client, unless they are current already
// (one read). A Locker does it on its first use unless Config.NoMigrate is
// set; call Migrate from a deployment step instead when the Lockers' user
// may not create tables.
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
	if _, err := client.Exec(ctx, script); err != nil {
		return fmt.Errorf("postgres: migrate (prefix %s): %w", prefix, mapErr(err))
	}
	return nil
}

// schemaCurrent reports whether the schema of prefix is the one this
// package migrates to.
func schemaCurrent(ctx context.Context, client Client, prefix string) (bool, error) {
	_, version := schemaBody(prefix)
	var comment *string
	err := client.QueryRow(ctx, "SELECT obj_description(to_regclass($1), 'pg_class')", pgx.QueryExecModeExec,
		prefix+"_locks").Scan(&comment)
	if err != nil {
		return false, fmt.Errorf("postgres: read the schema version (prefix %s): %w", prefix, mapErr(err))
	}
	return comment != nil && *comment == version, nil
}

// errNoSchema explains an undefined table or function when the Locker does
// not migrate.
var errNoSchema = errors.New("the adapter's tables or functions are missing or out of date: run postgres.Migrate (or the SQL of postgres.Schema), or let the Locker migrate (leave Config.NoMigrate false, migrate=true)")
