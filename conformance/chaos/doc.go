// Package chaos runs a fault campaign against a lock service and checks,
// offline, that fenced locks kept the data they guard safe.
//
// Workers are separate processes (this program re-executed, so that a pause
// is a real SIGSTOP of a whole process and a kill a real SIGKILL). Each one
// loops: Acquire the lock (auto-renewed, short TTL), admit the lease's
// token at the guarded store and read a shared counter there, hold for a
// random time, write the counter plus one through the fencing guard with
// the token, Release. The worker writes even after its loss signal fired,
// as a process paused between its check and its write would: the guard
// alone must stop a stale write. Every step is recorded, with its
// invocation and completion times, to DIR/history.jsonl.
//
// Each worker reaches the lock service through TCP proxies of its own, so
// that the nemesis can partition it (nothing closed, nothing passes) or
// slow its link. One fault at a time, round robin over the kinds asked for:
//
//	pause      SIGSTOP the holder for 2–3×TTL, then SIGCONT
//	kill       SIGKILL the holder (or a worker) and start a new worker
//	partition  blackhole the holder's link to the lock service for 1–2×TTL
//	latency    50–200 ms each way on a worker's link for 2×TTL
//	member     kill then restart, or pause then continue, a server member
//	           (only with Config.Members: servers this program controls)
//	failover   fail the Redis primary over through its Sentinel (only with
//	           Config.Sentinel: workers then follow the primary through it)
//	           or Config.Failover
//	slot-move  move the lock's hash slot to another master of a Redis
//	           Cluster, stopped halfway with its keys split for
//	           0.25–1×TTL (only with Config.SlotMove)
//
// When the campaign ends, the checker reads the history and counts, each a
// figure in the summary: stale writes accepted (an accepted write or admit
// whose token is lower than one accepted before it was invoked; must be 0),
// lost updates (accepted writes that wrote the same counter value, or a
// final counter below the accepted writes; must be 0), token anomalies (a
// grant whose token is not greater than one granted before it was asked
// for; must be 0), overlaps in real time (two holders at once: expected
// under pauses) and how many the guard caught, the loss signal against the
// next grant after each partition of a holder (must come first), grants
// per second and the longest time without a grant after each fault kind.
// porcupine (github.com/anishathalye/porcupine) checks that the guarded
// counter behaved as a fenced register, linearizably, and draws the
// timeline (DIR/timeline.html, with every hold and fault marked);
// DIR/report.html shows the checker's table above it and DIR/summary.json
// holds the figures.
//
// A program that runs campaigns must call WorkerMain first thing in main
// (or TestMain): in a worker process it runs the worker and exits.
package chaos
