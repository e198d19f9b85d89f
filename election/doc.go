// Package election elects one leader among candidates over any fencelock
// backend, with fenced terms.
//
// A candidate campaigns for a name with a value (its address, say) and
// leads once its campaign is granted the lock of that name; the grant's
// fencing token is the term number. Terms are granted in the order the
// candidates campaigned (where the backend queues, as etcd, ZooKeeper,
// Redis and PostgreSQL do), a term's token is larger than every earlier
// term's, and a term's loss signal (Term.Done, Term.Context) fires before
// the backend could grant the next term: a leader that sees it must stop
// acting as leader, and one that missed it (paused past its TTL) is stopped
// by the token at the resource it writes to (package fencing). This is what
// client-go's leaderelection does not give (kubernetes#23731) and why a
// stale leader cannot corrupt data here.
//
//	e, err := election.New(locker)
//	if err != nil {
//		return err
//	}
//	term, err := e.Campaign(ctx, "scheduler", "10.0.0.7:8080")
//	if err != nil {
//		return err
//	}
//	defer term.Resign(context.Background())
//	runScheduler(term.Context(), term.Token()) // every write carries the token
//
// Observers follow the leader without campaigning: Leader reads it once,
// and Observe delivers every change it sees, never an older term after a
// newer one, and tells "no leader" apart from "unknown" (the backend could
// not be reached).
//
// The value is stored with the lock in place of the holder identity (see
// backend.WithValue): on etcd it is the raw value of the candidate's key,
// so that a concurrency.Election on the same prefix and a fencelock
// Elector see the same leader and values, each exclusive with the other.
package election
