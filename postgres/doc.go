// Package postgres is the PostgreSQL adapter of fencelock: locks are rows
// of a lease table, their fencing tokens come from a sequence, their
// expiries are the database's clock, and waiters queue in a table of their
// own and are woken, one per release, by LISTEN/NOTIFY. It is built on
// github.com/jackc/pgx/v5.
//
// Open a Locker over a pgx pool you already have with New (its Config
// holds the adapter's own settings; the zero Config is the default), or
// from a URL with backend.Open after importing this package:
//
//	postgres://app:pw@db:5432/app?sslmode=verify-full&sslrootcert=/etc/ca.pem&ttl=10s
//	postgresql://app@pgbouncer:6432/app?listen_host=db:5432&prefix=locks
//
// # Model
//
// Everything lives in the database, under a prefix p (Config.Prefix, URL
// parameter prefix; default "fencelock"):
//
//   - p_locks: one row per lock name ever taken: name, owner (the
//     acquisition's id, NULL while the lock is free), token, expires (server
//     time, clock_timestamp() + TTL), granted, holder, metadata (jsonb: a
//     lock's object, or an election candidate's value; see Values),
//     queued (false only while the lock's queue is known to be empty) and
//     served (the queue position of the last waiter granted from it: the
//     queue's head is looked for above it).
//   - p_waiters: one row per waiting acquisition, in the order of the
//     sequence p_queue, each with an expiry its waiter renews, and the
//     holder and metadata its grant puts on the lock row.
//   - p_queue: the sequence that orders waiters.
//   - plpgsql functions p_acquire_v1, p_renew_v1, p_release_v1,
//     p_revoke_v1, p_inspect_v1 (and p_promote_v1 and the SQL function
//     p_delay_v1, which they call): each
//     operation is one statement and one round trip. Every function first
//     locks the name's row of p_locks, so all changes to one lock are
//     serialized by that row lock; within a function each statement sees
//     what committed before it (READ COMMITTED: under another isolation,
//     a database's or role's default_transaction_isolation, the functions
//     refuse with SQLSTATE ZF001 and a message naming it). The acquire and release
//     of a lock nobody waits for are one UPDATE of its row each, whose
//     conditions (free, queued false) are all on that row, so that a
//     concurrent grant or waiter that changed it makes PostgreSQL check
//     them again on its newest version.
//
// An acquisition takes a free lock with a new token and an expiry one TTL
// after the server received the request; a renewal extends the row only if
// it is still this acquisition's and has not expired (a lapsed row is never
// revived); a release frees only this acquisition's row, and grants the
// lock to the first live waiter in the same transaction: its queue row
// goes, the lock row takes its owner, a new token and the queue row's
// expiry (the waiter's own lease clock, which its renewals kept), and one
// notification on the waiter's Locker's channel carries the token, so the
// waiter returns without another round trip. A lock whose holder expired
// is granted in the same way by the next acquire statement or waiter's
// retry that finds it. Queue rows of waiters that stopped renewing (a
// crashed process) are skipped, and deleted by the grant that passes them
// or by the next acquire, release or revocation of the lock that finds no
// live waiter (it deletes them all before it marks the queue empty). Those
// of a lock nobody touches again stay; a lapsed row is never renewed, so
// DELETE FROM p_waiters WHERE expires < now() - interval '1 minute'
// removes them safely at any time. Rows of free locks stay (one small row
// per name). A free lock's row holds its last token, which the next
// grant's must exceed: delete only rows whose token the server's clock has
// passed (the clock floor then takes over), with
// DELETE FROM p_locks WHERE owner IS NULL AND token < (extract(epoch FROM clock_timestamp()) * 1e6)::bigint
// (a plain DELETE ... WHERE owner IS NULL could let the next token go
// back after the clock was stepped back or a lagging standby promoted).
//
// # Values
//
// An election candidate's acquisition (backend.WithValue, package
// election) stores its value in the metadata column, of its queue row
// while it waits and of the lock row once granted, as a jsonb string
// (to_jsonb of the text, made by the server), with holder NULL: a lock
// stores a JSON object or NULL there, so a string is always a value, and
// no column was added (the schema version is unchanged). The acquire
// statement is the same function with its metadata argument
// to_jsonb($6::text)::text; a lock's acquisition sends what it always
// sent. A promotion copies the queue row's value to the lock row with the
// grant. Status reports a jsonb string as the entry's Value, with no
// holder or metadata (metadata #>> '{}' reads it in SQL).
//
// Lease.Proclaim is one statement, which the Lockers' user may run with
// the grants below (UPDATE on p_locks):
//
//	UPDATE p_locks SET metadata = to_jsonb($4::text)
//	WHERE name = $1 AND owner = $2 AND token = $3 AND expires > clock_timestamp()
//
// It replaces the value only while the row is still the acquisition's
// grant (its owner id and token) and live by the server's clock, keeping
// the token and the expiry; no row updated (the lease was released,
// revoked, expired or granted to another) is backend.ErrLeaseLost
// (backend.ErrDeleted), with nothing stored. Like a renewal, it waits for a fenced write's FOR SHARE
// of the row. A Locker of a fencelock release from before values fails
// Status on a name a candidate holds or waits for (it reads metadata as
// an object); its locks are not affected.
//
// # Tokens
//
// A grant's token is the larger of the lock row's last token + 1 and the
// server's clock in microseconds (clock_timestamp(); the clock floor):
// tokens are microsecond timestamps (about 1.8e15), not 1, 2, 3. Grants
// of one name are serialized by the name's row lock, so each grant's token
// is larger than every earlier grant's of that name on the same data; the
// row is written in the grant's transaction, so that holds across a
// restart or a crash whenever the grant's commit was durable (fsync and
// synchronous_commit on, PostgreSQL's defaults). Tokens are never above
// math.MaxInt64 (a bigint).
//
// The clock floor is for the data going back: a failover to an
// asynchronous standby (or a crash with synchronous_commit=off) loses the
// last commits, among them the last grants and their tokens; the promoted
// server's rows hold older tokens, and a plain counter would hand the lost
// ones out again, so that a guard that had seen the stale holder's token
// would reject the new holder and admit the stale one. With the floor the
// promoted server's next token is its clock, above every token the old
// primary granted, provided its clock is not behind the old primary's by
// more than the time between the two grants: a promotion takes seconds,
// far more than the skew of NTP-synchronised hosts; a clock set back by
// more than that (or a server far behind) can still repeat tokens.
// Measured (TestAsyncStandbyPromotedTokens: a primary and an asynchronous
// standby through a multi-host URL with target_session_attrs=read-write,
// the standby cut off from the primary's WAL, 40 more grants, the primary
// killed and the standby promoted): the next token was above every token
// granted before, a memory guard rejected the stale holder's write and
// admitted the new holder's, and the stale holder's loss signal fired.
// Schema version 1's tokens (nextval of a sequence) went back there, from
// 46 to 34. The clock floor is always on: there is no setting that trades
// it away. A synchronous standby (synchronous_standby_names,
// synchronous_commit on or remote_apply) loses no acknowledged grant, so
// its promotion needs no floor; see "Synchronous standby".
//
// # Synchronous standby
//
// With a synchronous standby, every commit waits for the standby's
// acknowledgement, a grant's and a renewal's too. While the standby is
// away (TestSyncStandbyAway): an acquire statement is given up after one
// TTL (at least 2s) whatever its context allows, and fails with
// backend.ErrUnavailable (its grant, committed on the primary alone once
// the cancel request ends the wait, holds the lock until its TTL lapses,
// unused); a TryAcquire of a lock another holds answers
// backend.ErrNotAcquired at once from the committed row, without waiting
// for the row lock that the holder's waiting renewal keeps, as long as the
// committed lease has not expired (after that it waits for the row lock
// too, and fails with ErrUnavailable); holders' renewals wait, so their
// leases are lost at their local deadlines (the loss signal fires), and no
// caller is handed a grant until the standby is back. PostgreSQL offers no way to bound the wait itself
// without giving up the acknowledgement: the standby's absence costs the
// lock's availability, never its safety.
//
// # Waiting: FIFO, one wake-up per release
//
// Waiters are granted in the order their first statement reached the
// lock's row. Each Locker has one listener connection of its own, opened
// when its first acquisition waits and kept until it closes, listening on
// the channel "p:<Locker id>", where grants to its waiters and revocations
// of its acquisitions are notified; a release notifies exactly one waiter.
// The channel is the Locker's, not one per prefix: on a shared channel
// every Locker's listener would receive, and discard, every grant of every
// lock.
// A waiter is registered with the listener before its first statement, and
// when the listener (re)connects, its waiters try again (a notification
// may have been missed). A revocation's notification that reaches a waiter
// promoted meanwhile, before its Acquire returned, fails the Acquire with
// backend.ErrLeaseLost rather than returning the revoked grant. A waiter
// also tries again when the holder's lease would end (its fallback timer,
// in case a notification is lost or the holder crashed), and its
// renewals, every TTL/3, find a grant it was not told of. Without a
// listener (Config.NoListen, URL listen=false, or a client that is not a
// *pgxpool.Pool without Config.Listen), waiters rely on those alone: a
// grant reaches them within TTL/3. The same holds while
// the listener cannot connect (a wrong listen_host, a server refusing it):
// it tries again with a backoff of up to 1s, and nothing reports its
// failures, which show only as hand-offs that take up to TTL/3 instead of
// a round trip. A listener configured from a *pgxpool.Pool runs the pool's
// BeforeConnect before each connection.
//
// # Poolers
//
// Every statement is sent with pgx.QueryExecModeExec: one round trip, an
// unnamed statement, no session state, no advisory lock held across
// statements. So statements work through a transaction-mode pooler such as
// PgBouncer (tested through Debian's). LISTEN does not: a pooler gives the
// session back to its pool after each transaction. Point the listener at
// the server itself with Config.Listen, or the URL parameter
// listen_host=host:port: the listener's settings are the URL's with that
// host, so its TLS follows it (sslmode=prefer's plain-text fallback,
// verify-full checking that host's name); without that, waiters fall back
// to their timers and renewals.
// The migration is one simple-protocol message (one transaction), which a
// pooler passes to one server connection.
//
// # Migration
//
// By default a Locker creates or updates its tables and functions on first
// use (a Locker opened from a URL: in Open): it reads the schema version,
// the comment of p_locks (one round trip), and runs the migration only if
// it is lower than SchemaVersion. A later version is used as it is, never
// migrated down: it keeps the functions of earlier versions working (see
// SchemaVersion), so processes of both can run during a rolling deploy
// or a rollback. Over a current or compatible schema the migration takes
// no lock on the tables that a lock operation or a fenced write would
// wait for, and it gives up after a lock_timeout of 5s
// (backend.ErrUnavailable; the Locker tries again at its next call)
// rather than queue every lock of the prefix behind a table lock that
// waits for a long transaction. The migration is idempotent and takes a
// transaction-scoped advisory lock, so processes starting at once do not
// collide; a Locker's other calls wait for its migration only until their
// contexts end (backend.ErrUnavailable). To run it yourself, print it
// with Schema and apply it with psql or your migration tool, then set
// Config.NoMigrate (URL migrate=false):
//
//	sql, err := postgres.Schema("fencelock")
//	fmt.Print(sql) // psql -v ON_ERROR_STOP=1 -f schema.sql
//
// or call Migrate from a deployment step. A Locker that does not migrate
// and finds the tables or functions missing fails with an error that says
// so, never with backend.ErrNotAcquired. Functions carry a version (_v1),
// so that a later release can add _v2 beside them during a rolling upgrade;
// the body of a released function never changes.
//
// # Permissions
//
// The migration needs CREATE on the schema the tables go in (the first of
// the search_path). The Lockers' user needs only, for prefix p:
//
//	GRANT SELECT, INSERT, UPDATE, DELETE ON p_locks, p_waiters TO app;
//	GRANT USAGE ON SEQUENCE p_queue TO app;
//	GRANT EXECUTE ON FUNCTION p_acquire_v1, p_renew_v1, p_release_v1,
//	  p_revoke_v1, p_inspect_v1, p_promote_v1, p_delay_v1 TO app; -- PUBLIC has it by default
//
// The functions run with the caller's rights (SECURITY INVOKER). A refusal
// (SQLSTATE 42501, or an authentication failure) is an error matching
// backend.ErrPermission. With the schema current, a Locker that migrates
// only reads the version and needs nothing more.
//
// # Errors
//
// backend.ErrNotAcquired is returned only when the database answered that
// the lock is held (or had queued the acquisition when its wait was given
// up). A request that could not be sent or got no answer (a dial, a reset
// connection, a timeout, a server shutting down or refusing connections,
// a cancelled statement, a read-only standby) is backend.ErrUnavailable,
// as is a statement that a lock_timeout, a serialization failure or a
// deadlock ended (SQLSTATE 55P03, 40001, 40P01): they say nothing of the
// lock. A statement whose context ends is cancelled on the server too
// (pgx closes its connection with a cancel request), so it does not wait
// on there for the lock's row and take the lock later for nobody.
// An acquisition given up while its statement had no answer is released
// (its rows removed, if the statement had landed); should that statement
// reach the server only after the release, it takes the lock for a holder
// that is gone, until its TTL ends: nobody renews it.
//
// Loss causes: a revocation (Locker.Revoke and RevokeID, fencelock revoke)
// is backend.ErrRevoked when its notification reaches the Locker: one that
// listens, which it does from the first wait of one of its acquisitions
// on; a Locker that never waited finds the revocation at the next renewal,
// as below (TestLossCauses). A renewal, a
// Proclaim or a Release that finds the lock row gone or no longer this
// acquisition's (its owner or token changed), or a waiter's queue row gone,
// is backend.ErrDeleted: the statement does not tell a row deleted by
// hand, a revocation whose notification was missed and a row that lapsed
// by the server's clock apart (a row renewed in time does not lapse before
// its local deadline, which ends the lease first: backend.ErrDeadline, or
// backend.ErrExpired without renewals). ErrSessionLost is never reported.
//
// # Same-database fencing
//
// When the data a lock protects is in the same database, a write can check
// the token in its own transaction, so that it commits only while the
// lease row exists with this token:
//
//	SELECT 1 FROM p_locks WHERE name = $1 AND token = $2 AND owner IS NOT NULL
//	  AND expires > clock_timestamp() FOR SHARE
//
// FOR SHARE holds off every grant of that lock (a grant updates the row)
// until the writer's transaction ends, so no newer token can be issued
// between the check and the commit. It holds off the holder's own renewals
// too (they update the row as well): keep such transactions well under
// the TTL, or the lease's local deadline may pass first (its loss signal
// then fires; the write still commits safely). Package fencing/sqlfence
// offers the check.
//
// # Interoperability
//
// There is no other library's layout to match: PostgreSQL locks in other
// libraries are advisory locks (pg_advisory_lock; madelson/DistributedLock),
// which carry no token, hold a session, and do not work through a
// transaction-mode pooler, or hand-written lease tables of their own. This
// adapter's locks exclude only its own, and other tools see them as rows.
//
// # Client logs
//
// pgx logs nothing unless a tracer is set (pgx.ConnConfig.Tracer), and
// the adapter sets none on the pool and the listener it opens for a URL:
// nothing of theirs reaches os.Stderr. A Locker from New uses the caller's
// pool, with the caller's tracer.
//
// # Clients
//
// New takes a *pgxpool.Pool (or anything with its Exec, Query and QueryRow
// that is safe for concurrent use and runs each statement in a
// transaction of its own; a single session is not: a *pgx.Conn, a
// *pgxpool.Conn or a pgx.Tx is refused).
// Closing the Locker does not close a pool given to New; a Locker opened
// from a URL owns its pool and closes it. A URL without connect_timeout
// gets DefaultConnectTimeout; connect_timeout is a whole number of seconds,
// positive (0, which pgx and libpq take for no timeout at all, is refused
// before any dial, as a negative one is).
package postgres
