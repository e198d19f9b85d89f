// Package etcd is the etcd v3 adapter of fencelock: a driver.Driver that
// keeps one etcd lease per acquisition and queues waiters in etcd, FIFO.
//
// Open a Locker over a client you already have with New (its Config holds
// the adapter's own settings; the zero Config is the default), or from a
// URL with backend.Open after importing this package:
//
//	etcd://h1:2379,h2:2379/locks?ttl=10s
//	etcds://user:pass@h1:2379/locks?cacert=/etc/ca.pem&cert=/etc/c.pem&key=/etc/c-key.pem
//
// # URLs
//
// The host part lists the cluster members, comma-separated, each host:port
// (the port defaults to 2379; Go's URL parser requires the last host of a
// list to carry one if any other does, so give every host its port). The path is the key prefix without its
// leading slash ("etcd://h/locks" uses prefix "locks"; "etcd://h//locks"
// uses "/locks"); an empty path means "fencelock". Userinfo gives the etcd
// user name and password. Query parameters, besides the common ones of backend.Open
// (ttl, auto_renew, max_hold, drift, holder):
//
//   - dial_timeout: how long the client waits for a connection (Go
//     duration, default 5s).
//   - cacert, cert, key: PEM files for TLS: the CA bundle
//     that verifies the servers (default: the system roots) and the client
//     certificate and its key, for a cluster with client-cert-auth (both or
//     neither). They are accepted only with the etcds scheme, and read once,
//     when the URL is opened.
//
// TLS (1.2 or later) is on if and only if the scheme is etcds:
// "etcds://h:2379" verifies the servers against the system roots. Open
// (backend.Open) checks the URL before it dials: a dial_timeout that is not
// positive, a ttl under MinTTL or not whole seconds, a user without a
// password (clientv3 would silently not authenticate) are errors matching
// backend.ErrInvalidURL. It then authenticates and reads once within
// dial_timeout and the context; a cluster it cannot reach is an error
// matching backend.ErrUnavailable, a refused user one matching
// backend.ErrPermission. If the cluster has not answered after 250ms, Open
// probes the first endpoint: an etcds URL whose TLS handshake fails (an
// unknown authority, a client certificate required, a plain port) and an
// etcd URL aimed at a TLS port fail at once, with an error that says so. A Locker opened from a URL owns its client
// and closes it on Close; New never closes the client it is given.
//
// # Permissions
//
// On a cluster with authentication on, the URL's user needs one thing: a
// role with readwrite on the key range of "<prefix>/", the prefix with its
// slash, and nothing else, not even the key "<prefix>":
//
//	etcdctl role add locks-app
//	etcdctl role grant-permission locks-app readwrite --prefix locks/
//	etcdctl user add app
//	etcdctl user grant-role app locks-app
//
// for etcd://app:…@h:2379/locks. (With --prefix locks, without the slash,
// the role would reach "locks2/" as well.) Every request stays in that
// range: Open reads the one key "<prefix>/" (a reachability probe, never a
// lock key); acquisitions, waits, releases, Proclaims, Status, Revoke and
// RevokeID read, write, watch and delete keys <prefix>/<name>/<lease>.
// Lease grants and TimeToLive (without keys) need no key permission;
// keepalives and revokes need write permission on the keys attached to the
// lease, which are in the range (an idle lease of the pool has none). The conformance
// suite passes as such a user (TestRestrictedUserConformance).
//
// A refusal is an error matching backend.ErrPermission that keeps the
// server's message ("etcdserver: permission denied", or "authentication
// failed" for a wrong password), never ErrUnavailable or ErrNotAcquired:
// Open fails at once for a user without the grant, and a request refused
// later (a role revoked under a Locker, a waiter included) fails with it
// rather than being retried. Background renewal is the exception: it
// retries a refused keepalive until the lease's local deadline, and the
// loss cause then matches backend.ErrPermission too. Revoking an
// acquisition whose lease also holds keys outside the range (a
// concurrency.Mutex session's) is refused too.
//
// A user name and password travel in clear over etcd://; use etcds:// on a
// network you do not trust. No URL parameter turns certificate verification
// off: etcds:// always verifies the servers' chain (against cacert or the
// system roots) and name. A client of your own given to New can, with
// tls.Config.InsecureSkipVerify; that opens the connection, credentials and
// all, to interception, and is for tests only.
//
// # Key layout and token
//
// An acquisition of lock name N holding etcd lease L writes the key
//
//	<prefix>/<url.PathEscape(N)>/<L in lower-case hex>
//
// attached to L, with a small JSON value (holder and metadata) for status
// tools, or an election candidate's value (see Values and elections). The holder is the writer of the oldest key (lowest create revision)
// under <prefix>/<escaped N>/; the others queue behind it in create-revision
// order. This is the layout of etcd's concurrency.Mutex (NewMutex(session,
// prefix+"/"+N)) and of "etcdctl lock prefix/N", so holders of either and of
// this package exclude each other; for names that url.PathEscape changes
// ("a/b", "a b") the Mutex must be given the escaped name. Escaping makes
// every name's keys disjoint: no name reaches another name's keys or leaves
// the prefix.
//
// The fencing token is the create revision of the acquisition's key: etcd's
// revision grows with every write to the cluster, so a later grant always has
// a larger token. Every acquisition has its own lease and so its own key,
// even within one Locker, so two acquisitions of one name never share a key
// or a token (unlike two Mutexes on one Session, etcd#11360).
//
// # Values and elections
//
// An acquisition made with backend.WithValue (an election candidate's, as
// package election makes them) stores its value as it is, as the raw value
// of its key, in place of the JSON record. So this package and etcd's
// concurrency.Election on the same keys, NewElection(session,
// prefix+"/"+url.PathEscape(N)), are candidates of one election: each
// waits for the other's leader to resign, Election.Leader and Observe
// report a fencelock leader's value, and Status shows an Election
// leader's value. Status reports every entry's raw key value as
// Entry.Value (for a lock acquisition, its JSON record), and Holder and
// Metadata where that value is such a record.
//
// Lease.Proclaim replaces the value in one Txn: a put of the new value on
// the acquisition's key, keeping its lease, only if the key still has the
// acquisition's create revision (its token) and lease, so it never writes
// a newer holder's key, even one of the same name written since; otherwise
// it writes nothing and returns an error matching backend.ErrLeaseLost. The
// token is unchanged. Waiters watch their predecessor's key for its deletion only,
// so a Proclaim wakes none of them (nor a concurrency.Election candidate,
// which waits the same way), and Election.Observe sees the new value.
//
// # Round trips
//
//   - Uncontended acquire: 1 Txn (put our key if absent, and count the keys
//     of the name: if ours is the only one, it is granted). The
//     lease comes from a small per-Locker pool of idle leases, so no Grant
//     is needed when a lease was released within the last TTL/3; otherwise 1
//     LeaseGrant more.
//   - TryAcquire: 1 Txn (put only if the name has no key at all), so a
//     failed attempt writes nothing.
//   - Release: 1 Txn (delete our key only if its create revision is still
//     our token, so a stale or repeated release never deletes a newer
//     holder's key); the lease goes back to the pool, or, if the pool is
//     full, is left to expire (it holds no key; revoking it would be a
//     second write that the next grant queues behind).
//   - Waiting: 1 serializable read at our key's revision that finds the
//     immediate predecessor (outside the Txn: a read sorted by create
//     revision reads every key of the name, and inside the Txn it would hold
//     up every write's apply: 1,000 waiters queueing at once timed out), then
//     1 watch on the immediate predecessor key (deletions only: no
//     thundering herd, one waiter woken per release; for a waiter whose
//     predecessor held the lock when found, on our own key too, and the
//     keys between the two), created
//     without a start revision so that etcd serves it from its synced set
//     at once rather than from the 100 ms resync loop (the cause of the
//     Mutex's ~90 ms handoff tail), and 1 read each time the watch is confirmed or the
//     predecessor deleted: a serializable Range at the revision of that
//     watch response, which shows whether our key is still there and which
//     older key, if any, is left. The state at that revision plus the
//     watch's later events miss nothing, and the member serves it without
//     queueing behind concurrent writes' WAL fsyncs as a linearizable read
//     would; a member that cannot serve that revision (lagging, compacted)
//     gets a linearizable read-only Txn instead. For such a waiter (one
//     that queued right behind the holder, as in a handoff between two
//     contenders), while its last read shows the predecessor as the only
//     older key, that key's deletion is the turn without a read: keys
//     created later are newer, and the one watch delivers deletions in
//     revision order, so our key, not deleted before it, was there at that
//     revision. Its handoff thus costs the release's write and one event.
//     A waiter that queued further back reads once more when its turn
//     comes, as does one whose watch had to be created again on a new
//     stream (etcd versions with etcd-io/etcd#18089 can drop a deletion
//     from a watch that resumes at the compaction revision).
//   - Renewal: LeaseKeepAliveOnce every TTL/3 (scheduled by the backend
//     package).
//   - Proclaim: 1 Txn (put the value only if the key is still ours).
//
// Besides, a watch on the acquisition's own key, once it has been held for
// 50 ms (not awaited by any operation), reports the loss (the Lease's Done
// fires) as soon as the key is deleted or overwritten by another client,
// for example when an operator revokes the lease or deletes the key with
// Locker.RevokeID (the puts of the acquisition's own Proclaims, with its
// lease and a value it proclaimed, are not a loss).
//
// Loss causes: a lease etcd no longer has (a renewal, an acquisition or a
// Proclaim answered "lease not found") is backend.ErrRevoked; etcd answers
// alike for an expired lease, but a lease renewed in time cannot expire
// before its local deadline, which ends it first (backend.ErrDeadline;
// backend.ErrExpired without renewals). Our key found deleted is
// ErrRevoked if a read of the lease's TTL (1 round trip, 1s at most, before
// the loss is reported) finds the lease gone too (revoking a lease deletes
// its keys: etcdctl lease revoke, Locker.Revoke), else backend.ErrDeleted
// (etcdctl del, Locker.RevokeID, which deletes the key); overwritten by
// another client, it is
// ErrDeleted too. If that read gets no answer the loss is ErrDeleted. etcd
// has no session beyond the lease: ErrSessionLost is never reported.
//
// The watches of a Locker (of its own keys and its waiters' predecessors) share
// one gRPC stream and two goroutines (none while no key is watched): a held
// lock costs no goroutine of its own, and a waiter none but its caller's.
// Each watch is of one key, so a client receives the events of its own keys
// only. They resume from the last revision seen when the stream fails; one
// whose revision was compacted reads the key and watches again. The watches
// name themselves (etcd 3.4 or later), and go through the client's
// connection rather than its Watcher: New refuses a client whose Watcher is
// wrapped (namespace.NewWatcher); give the namespace as Config.Prefix instead.
//
// # Client logs
//
// A Locker opened from a URL gives its clientv3 client a zap logger that
// writes to backend.WithLogger's logger, at debug level with client=etcd
// and zap_level (retries, a cluster out of reach), or zap.NewNop without
// one: nothing it logs reaches os.Stderr. A Locker
// from New logs through the client it is given, as its Config.Logger
// (clientv3's default, when nil, writes JSON lines at warn level to
// os.Stderr). gRPC's own logger is process-wide (grpclog.SetLoggerV2) and
// the adapter leaves it alone: by default it writes only ERROR lines,
// which a client sees on protocol faults (a GOAWAY for too many pings),
// not on an unreachable or restarted cluster; GRPC_GO_LOG_SEVERITY_LEVEL
// turns more on.
//
// # Caveats
//
//   - etcd leases have whole-second TTLs, and a server raises a TTL below its
//     minimum (1.5 times its election timeout, in whole seconds: 2s with
//     the default 1s); Acquire rejects such a TTL, once the server has
//     raised it in the lease grant, with an error matching
//     backend.ErrInvalidOption instead of silently holding longer. New
//     accepts it (down to MinTTL, 1s): it asks the server nothing. So on a
//     server with default settings 2s is the shortest TTL that works.
//   - A leader change refreshes every lease to its full TTL, so a lock whose
//     holder died may outlive its TTL. This delays the next grant but never
//     breaks exclusion.
//   - Tokens rely on the cluster's revision never going backwards. Restoring
//     a snapshot does move it back unless it is restored with
//     "etcdutl snapshot restore --bump-revision" (and --mark-compacted); do
//     that, or tokens may repeat.
package etcd
