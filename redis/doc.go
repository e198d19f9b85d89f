// Package redis is the Redis adapter of fencelock: a backend.Driver whose
// acquire is one Lua script that takes the lock key with an expiry and
// issues a fencing token from a per-lock INCR counter.
//
// Open a Locker over a go-redis client you already have with New (or
// NewWithConfig for the adapter's own settings), or from a URL with
// backend.Open after importing this package:
//
//	redis://user:pass@host:6379/0?prefix=locks&ttl=10s
//	rediss://host:6380/0?clock_floor=true&wait_replicas=1&wait_timeout=200ms
//
// # Clients, Sentinel and Cluster
//
// New accepts any Client: something that runs scripts (go-redis's Scripter)
// and subscribes. *redis.Client, the Sentinel client of
// redis.NewFailoverClient (also a *redis.Client) and *redis.ClusterClient
// all fit:
//
//	c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: addrs})
//	l, err := redis.New(c, backend.WithTTL(10*time.Second))
//
//	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
//	l, err := redis.New(c)
//
// Closing the Locker does not close a client given to New; a Locker opened
// from a URL owns its client and closes it. URLs cover single servers only
// (for Sentinel or Cluster build the client and call New).
//
// # URLs
//
// redis:// is plain TCP, rediss:// is TLS (verified against the system
// roots; skip_verify=true turns verification off). Userinfo is the ACL user
// and password (or just a password: redis://:pass@host), the path the
// database number. Query parameters, besides backend.CommonParams:
//
//   - prefix: the key prefix (default "fencelock"; no '{' or '}').
//   - clock_floor: true for Config.ClockFloor.
//   - wait_replicas, wait_timeout: Config.WaitReplicas and WaitTimeout.
//   - dial_timeout, read_timeout, write_timeout, pool_size, max_retries,
//     client_name, protocol and the other go-redis client settings listed
//     in Params, passed to go-redis's ParseURL.
//
// # Key layout and token
//
// Lock name N (with '%', '{', '}' and ':' escaped as %XX, so that no name
// reaches another name's keys or breaks the hash tag) under prefix P uses:
//
//	P:{N}           the lock key: "<owner>:<token>", with a PX expiry
//	P:{N}:token     the token counter (INCR); it never expires
//	P:{N}:yield     a short-lived marker set by a release that woke waiters
//	P:{N}:released  the pub/sub channel a release publishes on
//
// All keys of a name share the hash tag {N}, so a Cluster keeps them in one
// slot and the scripts may touch them together. The owner is unique to one
// acquisition (a random per-Locker id and a sequence number), so two
// acquisitions of one name, even in one Locker, exclude each other and get
// different tokens; refresh and release compare it, so a stale or repeated
// release never removes a newer holder's key.
//
// The acquire script: if the lock key exists it returns the key's PTTL;
// otherwise it INCRs the counter and sets the lock key with PX TTL, as one
// atomic step, and returns the counter's value as the token. The token is
// thus strictly greater than every token granted before on the same data:
// see "Failover and lost counters" for when the data itself goes back.
//
// # Round trips
//
//   - Uncontended Acquire or TryAcquire: 1 (the acquire script; EVALSHA,
//     and once more as EVAL after a NOSCRIPT when the script cache was
//     emptied by a restart, failover or SCRIPT FLUSH). A failed TryAcquire
//     writes nothing.
//   - Release: 1 (the release script: delete if ours, PUBLISH).
//   - Renewal: 1 every TTL/3 (the refresh script: PEXPIRE if ours; a key
//     that is gone or someone else's is reported lost, never re-created).
//   - Waiting: 1 SUBSCRIBE when a Locker's first waiter for a lock arrives
//     (one pub/sub connection per Locker, shared by all its waiters), 1
//     acquire script after it, and 1 per wake-up.
//   - With WaitReplicas: the acquire script and WAIT go in one pipeline, so
//     still 1 round trip, plus the replication delay.
//
// NewLease sends nothing: the lock key carries its own expiry, which the
// acquire script starts, so a waiter has no lease to renew and the local
// deadline counts from the send time of the acquire script that succeeded.
//
// # Waiting
//
// A waiter subscribes to the lock's channel (and waits for the server's
// confirmation), tries again, and then tries once more on each release
// notice, or when the lock key's remaining TTL (returned by the failed
// attempt) plus 1-10% jitter has passed, in case a notice was lost (a
// holder that crashed, a release by another tool or a raw DEL, a broken
// pub/sub connection). There is no fixed-interval polling.
//
// Every release wakes every waiter of the lock: all of them retry, one
// wins, the rest wait again (N waiters: N wake-ups and N acquire scripts
// per release; measured, see BenchmarkContended8). Handoff is therefore
// one notice plus one script. Because a releaser that comes straight back
// would otherwise win that race (its script reaches the server before the
// waiters have heard the notice, as with polling libraries), a release that
// reached at least one subscriber sets a 50ms yield marker: a newcomer (an
// acquisition that has not yet been woken once, the releaser's next one
// included) is refused while it exists, and the next grant deletes it.
// Grants thus spread evenly over the contenders, but waiters are not served
// in arrival order (Capabilities FIFO false): a FIFO queue would need
// per-waiter entries with their own expiry and renewal, which this design
// avoids. TryAcquire ignores the marker: it takes any free key. On a Cluster, PUBLISH counts
// only the subscribers of the node that runs the script, so the marker may
// not be set; exclusion and tokens are unaffected.
//
// # Loss
//
// Redis does not tell anyone when a key expires or is deleted (keyspace
// notifications are server configuration, off by default), so the adapter
// has no Lost channel: a holder learns that its key is gone from its next
// renewal (every TTL/3) or from its local deadline.
//
// # Interoperability
//
// The lock key is the plain SET key value NX PX shape of redsync and
// bsm/redislock: give them LockKey(prefix, name) and their holders and this
// package's exclude each other. Their releases publish nothing, so a waiter
// of ours is granted after their release through its fallback timer (the
// key's PTTL at its last attempt). bsm/redislock v0.9.4 has no fence key.
//
// # Failover and lost counters
//
// Redis replicates asynchronously and, without persistence, forgets
// everything on restart. Both can move the counter back, and then a token
// repeats or goes backwards, which silently breaks fencing. Measured
// (TestFailoverTokens, TestRestartTokens: a replica promoted after it
// stopped receiving the primary's writes, then the primary killed; a server
// killed and restarted):
//
//   - Plain: the token granted on the old primary after replication stopped
//     is granted again by the new primary; after a restart without
//     persistence tokens start again at 1.
//   - Config.WaitReplicas (WAIT n t after every grant, in the same pipeline;
//     an unacknowledged grant is released and fails with ErrNotReplicated):
//     no token repeated in the failover test, because the grant that would
//     have been lost was never handed out. It guarantees that every token
//     handed out is on at least n replicas when handed out, so a failover to
//     one of them keeps it; it does not help if the promoted replica is not
//     one of those n (choose n = all replicas, or let Sentinel pick the most
//     up-to-date one), if replicas restart without persistence, or against
//     a restart of a primary without replicas or persistence. Each grant
//     waits for the replication round trip.
//   - Config.ClockFloor (token = max(counter+1, server time in
//     microseconds), the counter raised to it): tokens kept growing in both
//     tests. It holds whenever the server that grants a token has a clock
//     ahead of the clock of the server that granted any earlier token by
//     more than the grants between them (at most one per microsecond, far
//     fewer in practice: each grant is a script run). A failover or restart
//     takes far longer than the clock skew of NTP-synchronised hosts, so
//     in practice this holds; it does not if a server's clock is set back
//     (by more than the time since the last grant) or is far behind the
//     old primary's. It costs one TIME in the script. Tokens are then
//     microsecond timestamps (about 1.8e15), not 1, 2, 3.
//   - Persistence (appendonly yes, appendfsync always) keeps the counter
//     over a restart; with appendfsync everysec up to a second of INCRs may
//     be lost.
//
// The epoch-in-the-high-bits alternative was not taken: remembering the
// last epoch needs storage that survives exactly the events it guards
// against, and the server's clock is such storage for free.
//
// # Caveats
//
//   - Expiry is wall-clock time on the server: a server clock stepped
//     forward expires locks early. The local deadline (send time + TTL -
//     drift) cannot see that; fencing tokens still reject the stale writer.
//   - TTLs are whole milliseconds, at least MinTTL.
//   - The holder and metadata options are not stored in Redis: the lock
//     value stays the short "<owner>:<token>".
//   - The counter keys stay after their locks are released (one small key
//     per lock name ever used); deleting one restarts that name's tokens
//     (unless ClockFloor is on).
package redis
