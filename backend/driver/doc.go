// Package driver is the contract between fencelock's portable layer
// (package backend) and a backend adapter (etcd, zookeeper, redis, postgres,
// backend/mem). Users never import it: they program against backend's
// Locker and Lease. An adapter implements Driver and Lease, registers its
// URL schemes with Register, and returns errors wrapping this package's
// sentinels, which backend re-exports under the same names.
//
// The portable layer owns the lifecycle: validation, renewal, the local
// deadline and the loss signal, retries, the memoized and serialized
// Release, clean-up after a failed acquisition, and error mapping. A driver
// only talks to its backend: it takes and waits for the lock, renews, and
// releases; it reports what it observes (a lost lease, through
// Request.Lost, with its cause) and the send times that start expiry
// clocks (Grant.Sent, KeepAlive's result).
package driver
