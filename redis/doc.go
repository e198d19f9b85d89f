// Package redis is the Redis adapter of fencelock: a driver.Driver whose
// acquire is one Lua script that takes the lock key with an expiry and
// issues a fencing token from a per-lock INCR counter, raised to the
// server's clock in microseconds so that it never goes back.
//
// Open a Locker over a go-redis client you already have with New (its
// Config holds the adapter's own settings; the zero Config is the
// default), or from a URL with backend.Open after importing this
// package:
//
//	redis://user:pass@host:6379/0?prefix=locks&ttl=10s
//	rediss://host:6380/0?wait_replicas=1&wait_timeout=200ms
//	rediss://host:6380/0?cacert=/etc/ca.pem&cert=/etc/c.pem&key=/etc/c-key.pem
//	redis+sentinel://user:pass@s1:26379,s2:26379,s3:26379/0?master_name=mymaster
//	redis+cluster://user:pass@n1:7000,n2:7001,n3:7002?prefix=locks
//
// # Clients, Sentinel and Cluster
//
// New accepts any Client: something that runs scripts (go-redis's Scripter)
// and subscribes. *redis.Client, the Sentinel client of
// redis.NewFailoverClient (also a *redis.Client) and *redis.ClusterClient
// all fit:
//
//	c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: addrs,
//		ContextTimeoutEnabled: true})
//	l, err := redis.New(c, redis.Config{}, backend.WithTTL(10*time.Second))
//
//	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
//	l, err := redis.New(c, redis.Config{})
//
// ContextTimeoutEnabled lets a request return when its context ends, as
// Acquire, Release and the loss deadline need. A client without it (go-redis's
// default) works too: the adapter then runs each request on a goroutine of
// its own so as to return on time, which costs a hand-off between threads
// per request (on this project's 2-core machine, tens of µs per
// acquire+release under load).
//
// Closing the Locker does not close a client given to New; a Locker opened
// from a URL owns its client and closes it. A URL names a single server
// (redis, rediss), a Sentinel deployment (redis+sentinel, rediss+sentinel)
// or a Redis Cluster (redis+cluster, rediss+cluster): see "Sentinel and
// Cluster URLs". ParseURL, ParseFailoverURL and ParseClusterURL give the
// go-redis options a URL stands for, for a client of your own.
//
// # URLs
//
// redis:// is plain TCP, rediss:// is TLS 1.2 or later, verified against
// the system roots or cacert, for the host name of the URL.
// skip_verify=true turns verification off: the connection is then open to
// interception (anyone on the path can pose as the server, read the
// password and the locks, and answer as it likes), so it is for tests
// only; give cacert instead. Userinfo is the ACL user and
// password (or just a password: redis://:pass@host), the path the database
// number. Query parameters, besides the common ones of backend.Open
// (ttl, auto_renew, max_hold, drift, holder):
//
//   - cacert, cert, key: PEM files for TLS: the CA bundle
//     that verifies the server (default: the system roots) and the client
//     certificate and its key, for a server with tls-auth-clients (both or
//     neither). They are accepted only with the rediss scheme, and read
//     once, when the URL is opened.
//   - prefix: the key prefix (default "fencelock"; no '{' or '}').
//   - clock_floor: true (the default) or false for Config.NoClockFloor:
//     false makes tokens the plain counter, which can go back.
//   - wait_replicas, wait_timeout: Config.WaitReplicas and WaitTimeout.
//   - foreign_interval (a duration, or off), foreign_gap, mixed_fleet:
//     Config.ForeignInterval, ForeignGap and MixedFleet (mixed fleets: see
//     Interoperability).
//   - dial_timeout, read_timeout, write_timeout, pool_size, max_retries,
//     client_name, protocol and the other go-redis client settings,
//     passed to go-redis's ParseURL once checked: durations positive
//     (go-redis reads zero or less as "no timeout", which a lock client
//     must not have), pool_size at least 1, max_retries at least
//     -1, protocol 2 or 3, skip_verify on rediss only, min_retry_backoff
//     at most max_retry_backoff (a plain number is seconds, as go-redis
//     reads it), client_name printable ASCII without spaces (what Redis's
//     CLIENT SETNAME accepts).
//
// The path is the database number, from 0 to 2147483647 (what SELECT
// takes; the server's databases setting bounds it further).
//
// The host is one host[:port] (for a list, see "Sentinel and Cluster URLs"). Open checks every parameter before it dials, then sends one
// PING within dial_timeout (default DefaultDialTimeout, 5s) and the
// context: a server it cannot reach is an error matching
// backend.ErrUnavailable, a refused password one matching
// backend.ErrPermission. If the server has not answered after 250ms, Open
// probes it: a rediss URL at a plain port (which answers a plain PING, or
// waits silently for the TLS hello) and a redis URL at a TLS port fail at
// once with an error that says TLS.
//
// # Sentinel and Cluster URLs
//
// redis+sentinel:// (rediss+sentinel:// for TLS) names the Sentinels, as
// a comma-separated host list (default port 26379), and the master they
// monitor: the Locker's client (go-redis's failover client) asks them for
// the primary and follows a failover. Its userinfo and path are the
// primary's credentials and database, as in a redis:// URL; the query adds:
//
//   - master_name (required): the name the Sentinels monitor the primary
//     under ("sentinel monitor NAME ...").
//   - sentinel_username, sentinel_password: the Sentinels' own credentials,
//     if they have requirepass or ACLs (a password in a query: errors show
//     it as xxxxx).
//   - addr: more Sentinel addresses, comma-separated (go-redis's URLs
//     repeat addr; a fencelock URL gives each parameter once).
//
// redis+cluster:// (rediss+cluster://) names seed nodes of a Redis Cluster
// (default port 6379; addr adds more); the client learns the rest from
// CLUSTER SLOTS and follows MOVED and ASK redirections. A cluster has
// database 0 only, so the path is empty. Every other parameter is that of
// a redis:// URL, applied to every node. With TLS each node is verified
// for its own host name (the one the Sentinel or the cluster announces),
// unless skip_verify.
//
// Both run the whole conformance suite in this module's tests, on real
// servers: a primary, a replica and three Sentinels, and a cluster of
// three masters with a replica each (conformance/servers' sentinel and
// sharded topologies, local processes and Docker containers; TestURL),
// through the URL harness, which puts a fault proxy in front of every node
// the client dials. Over TLS (rediss+sentinel,
// rediss+cluster: every server, Sentinel, cluster bus and replication
// link TLS only, with client certificates) grants, a Sentinel failover and
// Nodes are tested. A failover (SENTINEL FAILOVER; CLUSTER
// FAILOVER TAKEOVER on the replica of the lock's master) while a lock is
// held is tested: the holder goes on, and later tokens are larger. A
// request that a cluster node refuses while its slot moves or its master
// fails over (MOVED or ASK where the client cannot follow them, as with
// WaitReplicas, whose pipeline goes to one node; CLUSTERDOWN; TRYAGAIN)
// matches backend.ErrUnavailable, the Redis error kept in the chain.
//
// # Slot migrations
//
// While a Redis Cluster moves a lock's slot to another master (redis-cli
// --cluster reshard or rebalance: CLUSTER SETSLOT IMPORTING and
// MIGRATING, MIGRATE, SETSLOT NODE), the lock cannot be used: a script
// that names several keys of a migrating slot runs only on a node that has
// them all, and every script of a lock names one that rarely exists (the
// queue while nobody waits, an acquisition's end mark), so the source and
// the target answer TRYAGAIN (or ASK, MOVED) until the slot is given to
// the target. Nothing is lost or repeated: a key moves whole, with its
// expiry, and the token counter moves with the lock key. A call that meets
// this sends its script again, 10ms later, the pause doubling up to 100ms,
// for up to 1s (half the TTL if that is shorter) and while its context
// lasts, then fails with backend.ErrUnavailable (the cluster's answer in
// the chain): a migration as redis-cli runs it, which moves a slot's keys
// in milliseconds, costs a grant or a release that long, not an error. A
// renewal is not sent again by the adapter (backend.Lease renews again
// TTL/10 later, holding the lease until its deadline): a migration shorter
// than the TTL costs a holder nothing; a longer one costs it its lease at
// its deadline, as any outage does, and nobody else gets the lock until
// the migration ends. Tested with a migration stopped halfway, the lock's
// keys split between the two masters (TestClusterSlotMove), and as a
// fault of the Redis Cluster's campaign (conformance/chaos).
//
// # Key layout and token
//
// Lock name N (with '%', '{', '}' and ':' escaped as %XX, so that no name
// reaches another name's keys or breaks the hash tag) under prefix P uses:
//
//	P:{N}               the lock key: "<owner>:<token>", with a PX expiry
//	P:{N}:token         the token counter: the last token; it never expires
//	P:{N}:queue         the waiters in arrival order (sorted set: owner -> arrival number)
//	P:{N}:queue:expiry  when each waiter's entry lapses (sorted set: owner -> server time in ms)
//	P:{N}:foreign       a foreign holder was seen (mixed fleets): when the key was last free, server ms (PX: 10 minutes from the last sighting)
//	P:{N}:gap           while a release leaves the key free for other tools' clients (PX: Config.ForeignGap, 3 times that within a minute of the last sighting)
//	P:{N}:ended:<owner> an acquisition released while its last attempt's fate was unknown (PX: 10 TTLs, 1 minute at least)
//	P:{N}:value:<owner> an election candidate's value (backend.WithValue), as it is (PX: 2 TTLs, renewed with its lease)
//	P:{N}:delay         the lock-delay of a holder that has one (backend.WithLockDelay): its owner (PX: TTL + the delay, renewed with the lock key, deleted by its clean release); no grant while it lives
//	P:wake:<locker id>  the pub/sub channel of one Locker's waiters
//
// All keys of a name share the hash tag {N}, so a Cluster keeps them in one
// slot and the scripts may touch them together. The owner is unique to one
// acquisition ("<locker id>.<sequence number>[D<lock-delay ms>].<ttl ms>",
// with a segment "v" before the TTL for an election candidate's), so two acquisitions of one
// name, even in one Locker, exclude each other and get different tokens;
// refresh and release compare it, so a stale or repeated release never
// removes a newer holder's key.
//
// The acquire script: if the lock key is free and no earlier waiter is in
// the queue, it takes the counter's next value as the token, at least the
// server's clock in microseconds (TIME; the clock floor, on by default:
// a counter below the clock, the usual case, is read and set to the clock,
// one above it is INCRed), leaves the counter at the token and sets the
// lock key with PX TTL, as one atomic step, and returns the token. The token is thus strictly greater than
// every token granted before on the same data, and, with the clock floor,
// than every token granted before the data went back: see "Failover and
// lost counters".
//
// # Round trips
//
//   - Uncontended Acquire or TryAcquire: 1 (the acquire script; EVALSHA,
//     and once more as EVAL after a NOSCRIPT when the script cache was
//     emptied by a restart, failover or SCRIPT FLUSH). A failed TryAcquire
//     writes nothing of its own (it may hand a free lock over to the waiter
//     whose turn it is).
//   - Release: 1 (the release script: delete if ours, grant the lock to the
//     next waiter and PUBLISH its token to that waiter's Locker).
//   - Renewal: 1 every TTL/3 (the refresh script: PEXPIRE if ours; a key
//     that is gone or someone else's is reported lost, never re-created).
//   - Waiting: 1 acquire script that joins the queue, and 1 refresh script
//     every TTL/3 for the waiter's queue entry; the grant arrives as a
//     message. A Locker's first wait joins the queue with that script, then
//     subscribes to its wake channel (1 SUBSCRIBE) and runs the script once
//     more, which also finds a grant made before the subscription; the
//     subscription stays until the Locker closes.
//   - Waiting behind a redsync or bsm/redislock holder (see
//     Interoperability): the first waiter in line runs the acquire script
//     every 2.5-50ms until the key is free; the others wait as above.
//   - Handoff: the release script and one message, which is the physical
//     minimum: the releaser's request reaches the server, and the grant
//     reaches the waiter.
//   - Election candidates (WithValue): the same, the value riding in the
//     acquire, refresh and release scripts; Lease.Proclaim 1 (a script);
//     Status 2 when a candidate holds or waits (see Election values).
//   - With WaitReplicas: the acquire script and WAIT go in one pipeline, so
//     still 1 round trip, plus the replication delay. A release then only
//     wakes the next waiter, which takes the lock with its own acquire
//     script and WAIT (handoff: one round trip more). Once a WAIT has
//     counted too few replicas on a node, the script goes alone and WAIT
//     follows on the same connection only after a grant (2 round trips
//     for a grant, 1 for a refusal), until a grant is replicated again:
//     see "Replicas and failover".
//
// # Election values
//
// An election candidate's acquisition (backend.WithValue, which package
// election uses) stores its value, as it is, in a key of its own beside
// the lock key, P:{N}:value:<owner>, under the lock's hash tag, so that a
// Cluster keeps it in the lock's slot; the scripts get its name in KEYS.
// The lock key keeps its "<owner>:<token>" shape, so redsync and
// bsm/redislock still exclude candidates, and a lock's acquisitions are
// untouched: they store no value and send exactly what they did before
// values existed (no command, round trip or allocation more:
// BenchmarkUncontended, TestUncontendedServerCalls).
//
// A candidate's value costs it no round trip: its acquire script stores
// the value when it takes the lock or joins the queue (a refused
// TryAcquire stores nothing), so a release that hands the lock to a
// waiting candidate finds its value there; each renewal (the refresh
// script, every TTL/3) extends the value key with the lock key or queue
// entry; the release script deletes it. Those scripts run one SET,
// PEXPIRE or DEL more for a candidate, and the user needs no ACL rule
// more (see Permissions). The value key lives two TTLs past its last
// renewal, so that it outlives the lock key or queue entry it belongs to
// (a release grants a waiter a lock key that lives one TTL from the
// grant, less than one TTL after the waiter's last renewal): a crashed
// candidate's value key expires within two TTLs, and a revoked or lost
// one is deleted by the release that follows the loss.
//
// Lease.Proclaim is one script call (one round trip): it sets the value key
// only if the lock key still holds the acquisition's "<owner>:<token>",
// else it stores nothing and fails with backend.ErrLeaseLost; the token
// stays. With WaitReplicas, WAIT follows it in the same pipeline as it
// follows a grant (whose WAIT covers the value the acquire script stored),
// and a value not acknowledged in time is an error matching
// backend.ErrUnavailable and ErrNotReplicated: call Proclaim again.
//
// Locker.Status reads the values of the candidates among the holder and
// the waiters, whose owner ids say they are candidates, with a second
// script call (GETs of their value keys; a status without candidates is
// one call, as before). A waiter that ended in between is left out; a
// holder that ended in between makes Status read the lock again (at most 3
// times). A lock's acquisition shows Value "".
//
// # Waiting: a FIFO queue
//
// Waiters queue in arrival order and are granted in that order
// (conformance Capabilities FIFO). A free lock with waiters is promised to
// the first of them: a newcomer, the releaser coming straight back
// included, queues behind them, and a TryAcquire is refused ("promised to
// an earlier waiter"). This spreads grants evenly over contenders, which
// polling libraries do not (the releaser re-grabs).
//
// A release (or revoke) hands the lock over in the same script: it takes
// the first waiter off the queue, issues its token, sets the lock key to
// its value with its TTL (carried in its owner id), and publishes
// "<owner>:<token>" on the wake channel of that waiter's Locker. Each
// Locker has one pub/sub subscription for all its waiters, so one release
// wakes exactly one waiter, whatever the number of waiters or Lockers, and
// the waiter holds the lock when the message arrives (measured in
// BenchmarkContended8: 1.00 wake-ups and 1.00 acquire scripts per grant).
// The waiter's local deadline counts from the send time of its last
// attempt, which queued it before the grant: earlier than the grant, so
// on the safe side. If the message is lost, the waiter's next attempt or
// renewal finds the lock key holding its value.
//
// On a Redis Cluster, a PUBLISH is delivered by the node that runs it to
// its own subscribers at once, and to the other nodes' over the cluster
// bus, whose links Redis opens without TCP_NODELAY, so that a notice may
// wait 30-40 ms for a delayed ACK (redis/redis#11869). A Locker on a
// cluster client therefore subscribes to its wake channel on every master
// while it has waited (its own subscription, on the master of the
// channel's slot, and a local one on each other master, refreshed at most
// every 30 s when a wait begins): a release's notice comes from the lock's
// own master, and a cluster's handoff takes the round trips a single
// server's does (BenchmarkClusterHandoff, 3 masters with a replica each,
// on a busy 2-core machine: p50 1.37x a single server's, as a write is
// 1.42x slower there; p99 not significantly apart; with the notices over
// the bus, 1.94x and 25x). The price: one pub/sub connection per master
// for a Locker that waits, and each notice arrives once per master (a
// grant's copies wake its waiter once; measured under contention on 3
// masters, no more CPU than without them). A PUBLISH still goes to every
// node of the cluster, a cost on each node per notice that does not shrink
// with more masters; sharded pub/sub (SPUBLISH, Redis 7) would keep each
// notice on its lock's shard, at the cost of a subscription per lock
// waited on.
//
// A waiter's queue entry lives one TTL (of its acquisition) unless renewed;
// the waiter renews it every TTL/3 like a holder's lease, so an entry left
// by a crashed waiter lapses within a TTL and is purged by the next script
// that touches the queue. Until then the lock stays promised to it: a
// crashed waiter delays the others by at most its TTL, as a crashed holder
// does. A waiter whose entry lapsed (it could not renew it in time) or was
// removed by an operator fails with backend.ErrLeaseLost at its next
// renewal or attempt, as an etcd or ZooKeeper waiter whose lease expired
// does; it never joins the queue again at the tail. Locker.RevokeID, which
// names a waiter by its owner id (as Locker.Status shows it), removes the
// entry in the revoke script and wakes the waiter, which fails at once.
//
// Notices can be lost (a pub/sub connection that broke, a holder that
// crashed, a release by another tool or a raw DEL publish nothing), so a
// waiter also tries again when the lock key's remaining TTL has passed (if
// it is next) or when the entry ahead of all may have lapsed (if not), plus
// 1-10% of jitter; and a renewal that finds the waiter next with the lock
// free wakes it. The only polling is behind a holder that is not
// fencelock's (see Interoperability).
//
// Queue entries carry server times, so, like key expiry, they follow the
// server's wall clock.
//
// # Permissions
//
// The least an ACL user needs, for prefix P (default "fencelock"), checked
// by TestMinimalACL (the conformance suite through a URL, as a user with
// exactly these rules) and TestACLEachRuleNeeded (each one less fails):
//
//	ACL SETUSER fencelock on >PASSWORD resetkeys ~P:* resetchannels &P:* -@all +evalsha +eval +subscribe +ping +get +set +del +pexpire +pttl +incr +time +publish +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscore
//
// The keys and channels P:* are the locks' (election values included) and
// the wake channels; EVALSHA,
// and EVAL after a NOSCRIPT, run the scripts, which the server checks
// command by command against the same ACL (GET to ZSCORE, PUBLISH on the
// channels); SUBSCRIBE is the wake channel's; PING is Open's. Add +wait
// with wait_replicas, +client|setname with client_name, and +select for a
// database other than 0. HELLO and AUTH need no rule; go-redis's CLIENT
// SETINFO may be refused (it ignores the refusal). A Sentinel or Cluster
// client sends commands of its own: add what it needs.
//
// A missing permission is an error matching backend.ErrPermission, with
// the server's message, at once: Open for PING, SELECT and CLIENT
// SETNAME, otherwise the first request that needs it. A wait whose
// subscription the server refuses fails at once too (it could not hear its
// grant), and its queue entry, or a grant a release gave it meanwhile, is
// released. A script stopped mid-way by a refusal keeps what it did before
// (Redis does not roll scripts back): for example, a release by a user
// without the channels hands the lock over and then fails to PUBLISH; the
// next waiter finds its grant at its next renewal, and the release reports
// the refusal. Give the user the whole line.
//
// # Loss
//
// Redis does not tell anyone when a key expires or is deleted (keyspace
// notifications are server configuration, off by default), so the adapter
// never reports a loss itself: a holder learns that its key is gone from its next
// renewal (every TTL/3) or from its local deadline.
//
// Loss causes: a lock key found gone or someone else's (a holder), or a
// queue entry gone (a waiter), is backend.ErrDeleted whoever removed it:
// Redis keeps no trace of why, so a DEL, Locker.Revoke and RevokeID (which
// delete the key or the entry), an eviction and an early expiry (a server
// clock jump, a failover that lost the last renewal) cannot be told apart.
// A key renewed in time does not expire before its local deadline, which
// ends the lease first (backend.ErrDeadline; backend.ErrExpired without
// renewals). ErrRevoked and ErrSessionLost are never reported.
//
// # Interoperability
//
// The lock key is the plain SET key value NX PX shape of redsync and
// bsm/redislock: give them LockKey(prefix, name) and their holders and this
// package's exclude each other, so a service can move from them to
// fencelock one process at a time (a mixed fleet). bsm/redislock v0.9.4
// has no fence key; their holders get no token from our counter.
//
// They do not queue, and their releases publish nothing. A mixed fleet
// therefore behaves as follows (TestForeignReleaseGrantsQueuedWaiter,
// TestForeignHammerDoesNotStarveWaiter, with redislock and redsync clients
// in other processes):
//
//   - A waiter of ours behind their holder: the acquire script reports,
//     when it refuses, that the key holds a value that is not a fencelock
//     owner id ("<locker id>.<seq>.<ttl>:<token>"; theirs are base64). The
//     first waiter in our queue then polls: it runs the acquire script
//     again after 2.5-5ms, the gap doubling up to 25-50ms (each gap drawn
//     at random from the upper half of its range), for as long as the
//     foreign holder holds, and takes the key as soon as a poll finds it
//     free. The waiters behind it do not poll: they are granted in turn by
//     the usual handoff. A foreign release thus reaches our queue within
//     about 50ms plus a round trip (measured under -race on a busy 2-core
//     machine, 7 samples a run: medians 7-42ms, max 105ms, over 7 runs per
//     library), not after the key's TTL; and a foreign client that obtains and releases back to
//     back, leaving the key free only between its release and its next
//     obtain, cannot starve our waiter: each poll finds the key free with
//     the chance that it is free (measured with 2ms holds: granted after
//     1ms-1.1s, about one poll in ten finding the key free). The polling costs one script run per poll, 20-40 a second
//     per lock while a foreign holder keeps a fencelock waiter waiting, as
//     redislock's own retry would. Behind a holder of ours nobody polls.
//   - Their clients behind our queue: a release of ours grants the lock to
//     the next waiter of ours in the same script, so the key is never free
//     while fencelock waiters remain, and a redsync or redislock client
//     that retries would get it only when our queue is empty (measured
//     with the gaps off, Config.ForeignInterval negative: foreign clients
//     waited until our Lockers stopped, 5s in TestMixedFleetWithoutGaps).
//     So once the acquire script saw a foreign value in the key (it marks
//     the lock, for 10 minutes after the last sighting), or on every lock
//     with Config.MixedFleet, the release that finds that the key has gone
//     from waiter to waiter of ours for Config.ForeignInterval (700ms)
//     since it was last free leaves it free instead, for Config.ForeignGap
//     (300ms, longer than redsync's default retry delay of 50-250ms;
//     within a minute of the last sighting three times that, 900ms, see
//     below); it wakes our next waiter, whose acquire script refuses it
//     until the gap ends, and whose next attempt takes the key if no
//     foreign client did (else it polls, as above). A foreign client that
//     retries thus gets the key within about ForeignInterval, one hold of
//     ours and its first retry in the gap; our waiters keep their order
//     and tokens keep growing (TestForeignGap). A gap of one retry
//     interval serves only one of several foreign clients that wait at
//     once, which take the key back to back while it is free: the others'
//     retries fail while it holds, and they would wait a whole cycle more
//     (measured with 300ms gaps: the longest wait 0.71-1.95s). So while a
//     foreign holder was seen within the last minute (the mark's TTL tells) a
//     gap lasts three times ForeignGap, in which each of them retries at
//     least three times. Measured (TestMixedFleetFair: two Lockers of ours
//     taking the lock back to back and two redislock or redsync child
//     processes, 10 or 30 rounds each, every hold 20ms, 50ms between a
//     child's rounds, on a busy 2-core machine, ten runs, one under -race):
//     the longest foreign wait of a case 0.66-1.55s (35 of 40 at most 1.2s,
//     their median 0.85s); the test's bound is 2s (see fleetForeignBound).
//     The cost: a gap that no foreign client uses leaves the lock idle, at
//     most a gap in every ForeignInterval and gap: two Lockers of ours alone
//     on a marked lock with 20ms holds got 38-55% of the grants per second of
//     an unmarked lock within a minute of the last sighting (900ms gaps),
//     50-88% after it (300ms gaps), for the 9 minutes the mark lives on. A
//     lock where no foreign holder was seen (a fencelock-only fleet) leaves
//     no gap (TestNoGapWithoutForeign); its handoff reads the mark, one GET
//     more. A foreign client that never
//     holds is never seen: if our queue stays busy from before any
//     foreign client held the key, set MixedFleet for the migration.
//     With WaitReplicas a release only wakes the next waiter, and a
//     foreign client may take the key in the meantime; that waiter then
//     polls.
//   - Their clients take a free key even when waiters of ours are queued
//     for it (they do not read the queue); a TryAcquire of ours would not.
//
// A value misread as fencelock's (only an operator's SET could look like
// one) makes our waiter wait for its fallback timer (the key's PTTL) as
// before; a fencelock value misread as foreign would only make it poll,
// and mark the lock for gaps. Neither affects exclusion, nor the order in
// which our waiters are granted.
//
// # Failover and lost counters
//
// Redis replicates asynchronously and, without persistence, forgets
// everything on restart; an operator or an eviction policy may delete a
// counter key. Each moves the counter back, and a plain counter's token
// then repeats or goes backwards, which silently breaks fencing: a stale
// holder's write is admitted while the new holder's is rejected. Measured
// (TestFailoverTokens, TestRestartTokens, TestCounterDeletedTokens: a
// replica promoted after it stopped receiving the primary's writes, then
// the primary killed; a server killed and restarted; the counter key
// deleted):
//
//   - Default, the clock floor (token = max(counter+1, server time in
//     microseconds), the counter raised to it): tokens kept growing in all
//     three tests. It holds whenever the server that grants a token has a
//     clock that is not behind the clock of the server that granted any
//     earlier token by more than the time between the two grants. A
//     failover or restart takes far longer than the clock skew of
//     NTP-synchronised hosts, so in practice this holds; it does not if a
//     server's clock is set back (by more than the time since the last
//     grant) or is far behind the old primary's. It costs one TIME and one
//     SET of the counter in the script (TestUncontendedServerCalls).
//     Tokens are microsecond timestamps (about 1.8e15), not 1, 2, 3.
//   - Config.NoClockFloor (URL clock_floor=false), a plain counter: the
//     token granted on the old primary after replication stopped is
//     granted again by the new primary; after a restart without
//     persistence, or once the counter key is deleted, tokens start again
//     at 1. Use it only where small tokens matter and the counter cannot
//     be lost: persistence with appendfsync always (which keeps the
//     counter over a restart; everysec may lose up to a second of INCRs),
//     no failover, no deletion.
//   - Config.WaitReplicas (WAIT n t after every grant, on the same
//     connection; an unacknowledged grant is released and fails with
//     ErrNotReplicated),
//     measured without the clock floor: no token repeated in the failover
//     test, because the grant that would have been lost was never handed
//     out. It guarantees that every token handed out is on at least n
//     replicas when handed out, so a failover to one of them keeps it; it
//     does not help if the promoted replica is not one of those n (choose
//     n = all replicas, or let Sentinel pick the most up-to-date one), if
//     replicas restart without persistence, or against a restart of a
//     primary without replicas or persistence. Each grant waits for the
//     replication round trip. It combines with the clock floor.
//
// The epoch-in-the-high-bits alternative was not taken: remembering the
// last epoch needs storage that survives exactly the events it guards
// against, and the server's clock is such storage for free.
//
// # Replicas and failover
//
// With Config.WaitReplicas = n, a grant is reported only once n replicas
// acknowledged it (WAIT), so it needs a primary with n replicas that are
// up to date. While it has fewer (a replica down, paused, resyncing, or
// a failover that left the new primary short):
//
//   - A holder keeps its lock: renewals and releases wait for no replica.
//   - A grant fails with an error matching backend.ErrUnavailable and
//     ErrNotReplicated ("0 of 1 replicas within 500ms"), and its key is
//     deleted again at once (or, if that fails, expires with its TTL); its
//     token is never handed out. Acquire fails so too, after its own WAIT
//     (it does not wait for the replicas to come back); TryAcquire of a
//     free lock likewise. The WAIT waits WaitTimeout (default 500ms), at
//     most half the TTL and three quarters of what is left of the context,
//     so the failure comes within that bound plus the round trips, before
//     the lease's local deadline and the context's end.
//   - A refusal (TryAcquire of a held lock, a waiter joining the queue)
//     answers with ErrNotAcquired or waits as usual: once a WAIT of the
//     Locker has come back short on that node, a refusal sends no WAIT
//     (the first one after the replicas left still waits the bound).
//
// (TestWaitBounded, TestReplicasShort.) The next grant comes as soon as
// the primary the client uses has n replicas that acknowledge: WAIT
// returns when they do, within a handoff.
//
// The time without a grant after one fault, with wait_replicas=1, a TTL
// of 2s, three workers taking one lock, each fault undone after the TTL
// (BenchmarkFailoverGap, 3 to 5 runs; local redis-server 7.0, Sentinels with
// down-after-milliseconds 1000, cluster-node-timeout 2000), and the part
// of it during which the deployment itself could grant nothing (the
// primary it names took no write that a replica acknowledged):
//
//	deployment            fault                             no grant     deployment's
//	Sentinel, 1 replica   replica killed or paused for 2s   2.0-2.1s     1.9-2.0s
//	Sentinel, 1 replica   primary killed, restarted         12.3-12.7s   12.2-12.7s
//	Sentinel, 1 replica   same, restarted as a replica      2.2-3.1s     2.2-3.1s
//	Sentinel, 1 replica   SENTINEL FAILOVER                 11.0-11.2s   11.0-11.2s
//	Sentinel, 2 replicas  replica killed or paused          0.01-0.24s   0
//	Sentinel, 2 replicas  primary killed, restarted         2.1-2.4s     2.0-2.3s
//	Sentinel, 2 replicas  SENTINEL FAILOVER                 1.0-1.7s     0.06-0.7s
//	Cluster, 3 x 1        replica killed or paused for 2s   2.0-2.1s     1.9-2.1s
//	Cluster, 3 x 1        master killed, restarted          4.1s         4.0-4.1s
//	Cluster, 3 x 1        CLUSTER FAILOVER                  0.06-0.14s   0.05-0.14s
//
// The adapter's part is 0.1s or less, except after SENTINEL FAILOVER with
// 2 replicas (about 1s): the promoted replica still had the lock key of
// a grant whose release reached only the old primary, which lives out
// its TTL. (A restarted cluster master refuses writes for 2s,
// CLUSTERDOWN, so that the cluster may make it a replica first; its
// replica, in sync again, does not fail over: 4.1s.)
//
// With one replica and wait_replicas=1, a failover leaves the new primary
// without a replica until the old primary comes back as its replica, and
// Sentinel does not make it one before 8s after it sees it again
// (sentinel.c waits SENTINEL_PUBLISH_PERIOD*4, 2s*4, before it
// reconfigures an instance that says it is a master, and looks at it
// every 10s): 11-12s measured, 8-18s possible, which no client can
// shorten without granting what no replica has. Two ways out: restart a
// failed primary as a replica of the primary the Sentinels name (as an
// init script that asks them does: 2.2-3.1s above); or run more replicas
// than n (the others follow the new primary within a second: 1.0-2.4s
// above), which trades some of what WAIT guarantees: a grant is then on n
// of the replicas, and a failover keeps it if Sentinel promotes one of
// those (it prefers the replica with the largest replication offset it
// has read, which has every acknowledged grant unless the replicas that
// acknowledged are down; the clock floor keeps tokens growing either
// way). A Redis Cluster makes a returning master a replica of its
// successor by itself.
//
// After a failover whose old primary stays up (SENTINEL FAILOVER, a
// partition), go-redis's Sentinel client moves its pooled connections to
// the new primary but not its pub/sub connection, so a Locker's wake
// channel stays subscribed on the old primary and hears no release of the
// new one until Sentinel makes the old one a replica. A waiter whose
// renewal finds a grant or a free lock that no message announced has the
// Locker check its subscription (a ping published on its own channel,
// which must come back within 1s) and subscribe again on the new primary
// (TestWakeupsFollowFailover). Measured as above (2 replicas, SENTINEL
// FAILOVER): grants came at full rate again (about 20ms apart) 2.2-2.4s
// after the failover, against 9.9-10.1s without the check (2 runs of 3),
// each handoff meanwhile waiting for the waiter's renewal (TTL/3).
//
// # Client logs
//
// go-redis (v9) logs through one process-wide logger, to os.Stderr by
// default ("redis: ... connection pool: failed to dial after 5 attempts"
// for every failed dial while a server is down), and has no per-client
// logger. A client the adapter opens for a URL must not write there, and
// the application's own clients must keep go-redis's default, so the
// package installs, when it is initialised, a logger that writes every
// line as go-redis's default does (same prefix, flags, file and line, on
// os.Stderr) except the lines about the clients it opened, which go to
// backend.WithLogger's logger at debug level with client=go-redis, or are
// dropped without one: those of their commands (by context) and of their
// failed dials (by the error, which their dialer registers). A Locker from New
// uses the caller's client, whose lines go wherever go-redis's logger
// sends them. An application that calls goredis.SetLogger (or
// logging.Disable) replaces the package's logger, as it would replace
// go-redis's default: every client's lines, the adapter's too, then go
// where it says.
//
// # Caveats
//
//   - Expiry is wall-clock time on the server: a server clock stepped
//     forward expires locks early. The local deadline (send time + TTL -
//     drift) cannot see that; fencing tokens still reject the stale writer.
//   - TTLs are whole milliseconds, at least MinTTL.
//   - The holder and metadata options are not stored in Redis: the lock
//     value stays the short "<owner>:<token>". An election candidate's
//     value (WithValue) is, in a key of its own (see Election values).
//   - The counter keys stay after their locks are released (one small key
//     per lock name ever used). Deleting one is safe with the clock floor
//     (the default); with NoClockFloor it restarts that name's tokens at 1.
//   - An Acquire that gave up (its context ended) while its script was held
//     in the network removes what it queued and leaves an end mark, so
//     that the script, if it still arrives, takes nothing (the etcd
//     adapter revokes such an attempt's lease, and the ZooKeeper adapter
//     waits for the create's outcome). The mark lasts 10 TTLs, a minute at
//     least: a script that arrives later still can hold the lock for its
//     TTL.
package redis
