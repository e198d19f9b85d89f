//go:build race

package etcd

// raceDetector is whether the tests run under the race detector, which
// slows the in-process server about tenfold.
const raceDetector = true
