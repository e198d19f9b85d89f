//go:build race

package postgres

// raceDetector is whether the tests run under the race detector, which
// slows the client side several times over.
const raceDetector = true
