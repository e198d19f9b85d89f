// Package zookeeper is the ZooKeeper adapter of fencelock: a driver.Driver
// that queues acquisitions as ephemeral sequential nodes, grants the lock to
// the oldest, and uses the node's czxid as the fencing token.
//
// Open a Locker with Dial (the adapter owns its sessions), over a Conn you
// already have with New (both take a Config; the zero Config is the
// default), or from a URL with backend.Open after importing this
// package:
//
//	zk://h1:2181,h2:2181/locks?ttl=10s
//	zk://alice:s3cret@h1:2181/locks?session_timeout=10s
//	zks://h1:2281,h2:2281/locks?ttl=10s&cacert=ca.pem&cert=client.pem&key=client-key.pem
//
// # Recipe
//
// An acquisition of lock name N creates, under the directory
// <prefix>/<escaped N>, a protected ephemeral sequential node
//
//	_c_<32 hex digits of a random guid>-lock-<10-digit sequence>
//
// the naming of Apache Curator's InterProcessMutex and go-zookeeper's
// zk.Lock, so holders of either and of this package on the same directory
// exclude each other (zk.Lock: zk.NewLock(conn, "<prefix>/<escaped N>",
// acl); Curator: new InterProcessMutex(client, the same path)). Nodes are
// ordered by the sequence suffix; children whose names do not end in
// "lock-<digits>" are ignored. The oldest node holds the lock; each waiter
// sets a data watch on its immediate predecessor only (no herd), and reads
// the children again when the predecessor goes; a node that has existed for
// 50ms is watched too, so that its deletion is noticed at once. Missing directories are created as container nodes, which the
// server deletes once they are empty.
//
// Names are escaped to one path segment: every byte but ASCII letters,
// digits, '-', '_', '.' and '~' becomes %XX, and the segments "." and ".."
// (which ZooKeeper rejects) become %2E and %2E%2E, so "a/b" is a%2Fb, "%2F"
// is %252F, and no name reaches outside its own directory or shares it.
// For names that escaping changes, give Curator or zk.Lock the escaped
// path.
//
// If the connection drops with the create in flight, the node is looked up
// by its guid before anything else (protected mode), so there is never a
// second one. Any error, cancellation or deadline after the create was sent
// deletes our node: the delete (and the wait for a create still in flight)
// continues in the background after the caller's context ends, retrying
// while the session lives, so a cancelled Acquire never leaves an orphan
// that would block the next one (go-zookeeper#229). A create that
// go-zookeeper held back while disconnected and sent once reconnected, in a
// new session because ours had expired, fails the acquisition with
// backend.ErrLeaseLost and its node is deleted too: it would otherwise live
// as long as the Locker's new session. Release deletes our node
// with its data version (0 from the create, or what our last Proclaim left;
// never -1); the path, with its guid, is ours alone, so a stale or repeated
// Release never touches another holder's node. Release is idempotent; a node found gone after the grant
// reports backend.ErrLeaseLost.
//
// # Token
//
// The token is the czxid of our node: a zxid, which grows with every write
// to the ensemble and across leader changes and restarts (epoch << 32 |
// counter). It is never the sequence suffix, a per-directory counter that
// restarts when the directory is deleted and re-created.
//
// go-zookeeper's create returns no Stat (it drops the reply's zxid, and has
// no create2), so the create is a Multi of two operations in one
// transaction: the create, and an unconditional setData of empty data on
// the lock directory. A transaction has one zxid, so the directory's new
// mzxid, which the setData returns, is our node's czxid: the token costs no
// extra round trip. The same Stat holds the directory's child count after
// the transaction: when it is 1, our node is alone, so it holds the lock
// and the getChildren that zk.Lock and Curator send after their create is
// not needed. The price: the directory's data is reserved (emptied,
// its version bumped on every acquisition), and the client needs WRITE on
// it; without it the adapter falls back to a plain create, whose czxid is
// found as below for a contended lock (one exists more when it does not
// wait).
//
// The setData is a write the server logs, so it is skipped where it buys
// nothing: when a Locker's last acquisition of a lock had to wait, its next
// one of that lock likely waits too and creates its node with a plain
// create. The waiter's watch on its own node returns the node's Stat, czxid
// included, so the token still costs no request; only if the lock turns out
// to be free does the acquisition read the czxid (1 exists), and the one
// after it uses the Multi again. With 8 contenders and zero-length holds
// this cuts what the server allocates per grant by a tenth (about 89 to 80
// KB with the test server's JVM, measured from its GC log).
//
// # Round trips
//
//   - Acquire of a free lock: 1 (the Multi), where zk.Lock and Curator
//     take 2 (create, getChildren). When the directory holds other nodes
//     (waiters, or nodes that are not locks), 1 getChildren more. After an
//     acquisition that waited: a plain create and 1 getChildren, and 1
//     exists if the lock is free after all.
//   - TryAcquire: the 1 of Acquire on a free lock; on a held one, the
//     Multi, 1 getChildren and 1 delete of our node. It does not read
//     first: a server answers reads from its own copy, which may lag the
//     leader's, so the release of another client may not have reached it
//     yet, while what a read finds after our own create is current.
//   - Release: 1 delete.
//   - Waiting: a getData watch on the predecessor (1), one on our own node
//     (1) and, two or more places back, one on the node ahead of the
//     predecessor (1). Sequence numbers only grow, so no node can join
//     ahead: when the predecessor was the only node ahead and goes, the
//     waiter holds the lock without a read. When
//     the node ahead of the predecessor goes, the predecessor has most
//     likely just been granted the lock, and the waiter reads the children
//     then (1), while the predecessor holds, to learn that only the
//     predecessor is left ahead. A handoff thus costs the release's delete
//     and one watch event, where zk.Lock and Curator add a getChildren
//     after the event; the read moves off the handoff, at the price of one
//     more watch and event per grant. The watch on our own node is what
//     makes a grant without a read safe: events arrive in the server's
//     order, so a deletion of our node (a revocation, an operator's
//     delete) is seen before the predecessor's, and a waiter never takes
//     the lock without its node; once granted, the same watch signals a
//     loss. Counted at the server with 8 contenders and zero-length holds
//     (TestContendedRequestsPerGrant): 7 requests and 3 watch events per
//     grant, where zk.Lock makes 5 and 1 (it reads after every wake-up).
//     Measured beside zk.Lock in alternating rounds: with zero-length
//     holds, grants/s about 1.3x, handoff p50 about 0.8x and p99 0.6–0.8x
//     of zk.Lock's; with 1 ms holds, grants/s 1.5–1.7x, p50 about half
//     and p99 0.5–0.75x (see docs/performance.md).
//   - A long queue: a release wakes two waiters, however many wait (no
//     herd): its successor, which takes the lock without a request, and
//     the waiter behind it, which reads the children (1) while the
//     successor holds. While a queue drains (each waiter releasing once
//     granted), 2 requests and 2–3 watch events per release with 200 or
//     1,000 waiters, counted at the server (TestDrainWakeupsPerRelease);
//     1,000 waiters are granted in queue order (TestThousandWaitersFIFO).
//   - Renewal: 1 exists of our node every TTL/3 (scheduled by the backend
//     package): it proves the session alive (the server renews a session on
//     every request) and our node present.
//   - A lease's expiry clock starts at the send time of the last request
//     answered in its session; if that is older than TTL/3 (an idle Locker)
//     the acquisition first sends one exists of the prefix (1 more).
//   - Our own node gets a data watch once it has existed for 50ms, waiting
//     or held (1, off the latency path), which fires the loss signal when
//     an operator deletes it. A write to our node's data fires the watch
//     too; it is set again (1).
//   - Proclaim (a candidate's new value): 1 setData of our node. Off the
//     caller's path, the write fires the watch on our node (set again, 1)
//     and the watches of the two waiters behind it at most, which set
//     theirs again (1 each) and wait on without reading the children.
//
// # Values
//
// A lock acquisition's node holds its holder identity and metadata as JSON
// ({"holder":...,"metadata":{...}}). An election candidate's
// (backend.WithValue, package election) holds its value instead, as it
// is: the node's raw data, the value's UTF-8 bytes (empty data, never
// null, for ""). Status reports every node's data as Entry.Value, whoever
// created the node, and Holder and Metadata where the data is that JSON
// record. Status (and so election's Leader and Observe) sends a sync
// before it reads: a Locker keeps a session per TTL, and without it a
// session on a lagging follower could miss a grant just made on another
// (a leader's own Leader call said "no leader" on a three-server ensemble).
// That is one more round trip per Status.
//
// Curator's LeaderSelector is an InterProcessMutex whose lock nodes hold
// the participant id (setId) as UTF-8 data, so a candidate's node is what
// it makes: a protected ephemeral sequential _c_<guid>-lock-<seq> node in
// the election's directory (<prefix>/<escaped name>, as for a lock), with
// the value as data. Its getLeader() and getParticipants() sort every
// child of the directory by what follows the last "lock-" and read each
// node's data as a participant id: they name fencelock's leader, and list
// its candidates, by their values (a fencelock lock acquisition there by
// its JSON record). A LeaderSelector on that path queues in the same line
// as fencelock's candidates, and Status and package election read a
// LeaderSelector participant's id as its Value (one without setId writes
// its client's defaultData, by default the local host's IP address). Curator's LeaderLatch is not
// matched: its nodes are _c_<guid>-latch-<seq>, which this package ignores
// (not lock nodes), and it sorts children by what follows the last
// "latch-", so fencelock's nodes sort after every latch node, by their
// random names: a LeaderLatch and fencelock candidates on one path would
// each take themselves as the leader, and its getLeader() would not name
// fencelock's. Do not mix them.
//
// Lease.Proclaim replaces a held candidate's value with one setData of its
// own node, at the data version it last wrote (0 from the create); the
// token, the node's czxid, is unchanged. The node exists only while it
// holds the lock (sequence numbers only grow), and its path, with its
// guid, is that acquisition's alone, so a node found gone (revoked,
// expired, deleted) is backend.ErrLeaseLost and the write stores nothing,
// never in another holder's node; a version conflict (another client wrote
// the node) costs 1 exists and the write again. The write fires the data
// watches on the node: the holder's own is set again (no loss), and the
// waiters right behind set theirs again and wait on. While the connection
// is down Proclaim fails at once with backend.ErrUnavailable; a write still
// unanswered when its context ends returns then, with
// backend.ErrUnavailable (it may be applied all the same). Revoke deletes
// the node whose czxid is the token without a version check, as RevokeID
// deletes by name, since a candidate's data version changes while it holds.
//
// # Cost of a held lease
//
// A held lease runs no goroutine of its own: renewals are timers (package
// backend), and the watches on the leases' own nodes are dispatched by
// their session: by the Conn's event callback on a Conn the Locker dialed,
// which hands each event to its lease as it arrives, and on a caller's Conn
// (New), whose events go to the caller, by the loop that already follows
// the Conn's state every 25ms, which then reports a deletion within that
// interval. go-zookeeper sets the watches again after a reconnection, and
// a session's end loses every lease of it. Measured with 10,000 leases held
// in one session (BenchmarkHeld10000): 0 goroutines and about 1.5 KB of
// heap per lease.
//
// # Sessions and leases
//
// A lease is a ZooKeeper session: its TTL is the session timeout, which the
// server negotiates (bounded by its minSessionTimeout and
// maxSessionTimeout, 2 and 20 ticks by default). Dial's first session's
// negotiated timeout is the Locker's default TTL; a TTL must be whole
// milliseconds and exactly what the server grants: one it raises or lowers
// is refused with an error matching backend.ErrInvalidOption that names what
// it grants. A Locker from Dial keeps one session per distinct TTL in use
// (opened on first use, closed by Close), shared by all its acquisitions of
// that TTL; each acquisition still has its own node, so two acquisitions of
// one name in one Locker exclude each other. A Locker from New has the
// caller's Conn and its one session: only its negotiated timeout is
// accepted. go-zookeeper does not expose the negotiated timeout; the adapter
// reads it from the Conn (see NegotiatedTimeout).
//
// The local loss deadline is the send time of the last renewal (or of the
// request that proved the session alive) plus the TTL minus the drift
// margin: the server expires a session no sooner than its timeout after the
// last request it received, so the holder gives up before anyone else can
// be granted the lock.
//
// When the session ends (the server expired it, or the Conn was closed),
// every lease of that session is lost: its loss signal fires and Release
// reports backend.ErrLeaseLost.
//
// Loss causes: a session that ended (expired on the ensemble, closed,
// replaced by a new one: also when the deletion of our node, which the
// expiry did, is what the adapter sees first) is backend.ErrSessionLost;
// our node found deleted while the session lives is backend.ErrDeleted
// (TestOwnNodeDeletedIsLoss, TestSessionExpiry*), which is also what the
// adapter's Revoke does (it deletes the node): a revoke and someone else's
// delete cannot be told apart. A client cut off learns of its session's
// expiry only once it reconnects, after its local deadline: such a loss
// is reported as backend.ErrDeadline first, and ErrSessionLost is seen
// when the session ended while the client was connected (closed with its
// credentials, as the tests do) or expired within the drift margin. go-zookeeper replaces an expired session by
// a new one on the same Conn without telling its callers; the adapter sees
// the session id change (from the Conn's events when it dialed the Conn,
// by polling its state every 25ms over a caller's Conn) and never carries a
// holder over: new acquisitions run in the new session.
//
// # Suspended and lost
//
// A dropped connection is not a lost session: the session lives on the
// server until its timeout, and the client cannot know whether it will
// reconnect in time. The adapter reports it as suspended (Lease.Suspended;
// Curator's SUSPENDED) and the loss signal as lost
// (Curator's LOST). Default policy: suspension alone does not end the lease;
// renewals fail while suspended and are retried, and the loss signal fires
// at the local deadline unless the connection comes back first (with the
// session) and a renewal succeeds. This is Curator's standard policy with
// its session-timeout bound. A holder that must not act while in doubt
// (Curator's SessionConnectionStateErrorPolicy) watches Suspended and pauses
// its writes; the fencing token protects the resource either way.
//
// # ACLs and chroot
//
// Dial with Config.User (URL: user:password@) authenticates every session
// with the digest scheme and creates every node (directories and lock
// nodes) with the ACL auth:PermAll: only clients with the same credentials
// can read it, write it, queue under it or delete its lock nodes
// (ZooKeeper checks DELETE on the parent, so the directory's ACL is what
// keeps others from deleting a lock node). Without credentials, and over a
// caller's Conn, nodes get world:anyone PermAll. go-zookeeper has no
// chroot; the prefix plays that part: a Java client with connect string
// "h:2181/app" and lock path "/locks/x" uses the node that prefix
// "/app/locks" gives to name "x".
//
// # Permissions
//
// What a digest user needs:
//
//   - A prefix that does not exist yet: nothing. The Locker creates it, its
//     missing ancestors and the lock directories as container nodes with its
//     own ACL (the server deletes a container once it is empty).
//   - A prefix an operator created beforehand, under another identity:
//     CREATE on the prefix for our user, nothing more, and nothing on its
//     ancestors (the lock directory is created first, and its parents only
//     while they are missing: ZooKeeper checks CREATE on the parent before
//     it looks for the node). For example, as the operator:
//     setAcl /app/locks digest:admin:<hash>:cdrwa,digest:app:<hash>:c, where
//     <hash> is base64(sha1("user:password")). The conformance suite passes
//     so, under an ancestor closed to our user
//     (TestRestrictedUserConformance); every node below the prefix is then
//     our user's alone.
//   - A lock directory created by someone else (a Curator or zk.Lock client
//     with its own ACL): READ, CREATE and DELETE on it, and WRITE for the
//     one-request acquisition (without it a plain create takes its place,
//     see Token).
//
// When another identity created the prefix first with an ACL that leaves
// our user out, Open succeeds (it makes no request on the prefix), and
// every Acquire, TryAcquire, Status, Revoke and RevokeID there fails at
// once (a few round trips, no wait) with an error matching backend.ErrPermission
// that keeps the server's "zk: not authenticated" and, for a new lock, names
// the node whose ACL refused. That identity (or a super user) must grant
// our user CREATE on the prefix, or delete it.
//
// Digest credentials travel in clear over zk:// (ZooKeeper hashes them on
// the server); use zks:// on a network you do not trust. No URL parameter
// turns certificate verification off: zks:// always verifies each server's
// chain (against cacert or the system roots) and name. A Config.TLS of your
// own with InsecureSkipVerify would open the connection, credentials and
// all, to interception, and is for tests only.
//
// # URLs
//
// The host part lists the ensemble, comma-separated host:port (port 2181 by
// default; give every host its port if any has one). The path is the
// prefix ("zk://h/app/locks": "/app/locks"; none: DefaultPrefix). Userinfo
// gives digest credentials (user and password both). Query parameters,
// besides the common ones of backend.Open
// (ttl, auto_renew, max_hold, drift, holder): session_timeout (Go duration) and
// dial_timeout (Go duration, default DefaultDialTimeout, 10s), which bounds
// Open's wait for the first session, context deadline or not: a refused
// connection, a server that accepts and never answers, or any other reason
// for no session is an error matching backend.ErrUnavailable that says what
// was seen. A ttl or session_timeout under MinTTL or not whole milliseconds
// is an error matching backend.ErrInvalidURL, before any dial, and so is a
// drift not under the session timeout asked for. A lease's TTL is its
// session timeout: the timeout the server grants for ttl (or
// session_timeout, which must agree with ttl if both are given) is the
// Locker's default TTL. A Locker opened from a URL owns its sessions.
//
// zks:// is zk:// over TLS (Config.TLS), for servers that serve their
// secureClientPort (which needs
// serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory).
// It takes the TLS parameters: cacert, the CA bundle that verifies the
// servers (default: the system roots), and cert and key, the client
// certificate for a server with ssl.clientAuth=need; on zk:// they are an
// error matching backend.ErrInvalidURL. Every connection, to every server of
// the list and on every reconnection, is TLS, and each server's certificate
// must name it as the URL writes it (DNS name or IP address). go-zookeeper
// retries a failing server forever; Open gives up, with the TLS error (a
// certificate from an unknown authority, a refused client certificate), as
// soon as every server has failed TLS once in a row, context deadline or
// not, and a handshake that a plain port answers says so. A plain zk:// URL
// to a TLS port (the server closes the connection without a word) fails as
// soon as a probe finds the port speaks TLS, with an error that says to use
// zks://.
//
// # Client logs
//
// go-zookeeper's own log lines (a failed connection, a receive loop that
// ended) never reach os.Stderr through the adapter: a Locker from Dial or
// from a URL hands those of the sessions it opens to the logger of
// backend.WithLogger (Dial's opts, or Open's), at debug level with
// client=go-zookeeper, and drops them without it, as the other adapters do
// with the clients they open; the Locker reports what they mean (a
// suspended session, a lost lease) through its errors and its own logs. A
// Locker from New shares the caller's connection, whose logger is the
// caller's (zk.WithLogger; go-zookeeper's default writes to the standard
// log package).
//
// # Caveats
//
//   - The lock directory's data is reserved: every acquisition empties it
//     (see Token).
//   - Sequence suffixes are int32 counters: a directory that has seen 2^31
//     creates orders its nodes wrongly (as it does for Curator and zk.Lock).
//     Container directories are deleted when empty, which resets it.
//   - A server that resets its zxid (a new ensemble on empty data) restarts
//     the tokens: keep the data directory, or bump the resource's fence.
//   - The negotiated session timeout is read from go-zookeeper's Conn by
//     reflection (go-zookeeper v1.0.4 has no accessor for it); a
//     go-zookeeper without that field makes Dial and New fail rather than
//     guess, and the package's tests pin the field and check the value read
//     against the server's own record of the session.
package zookeeper
