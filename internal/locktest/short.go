package locktest

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// restrictedCases are the suite's cases that a run as a restricted user
// keeps under -short: between them they send every request an adapter
// makes (take, wait and be woken, renew, release, Status, a cancelled
// wait's clean-up, an election's value, Revoke and RevokeID of a holder
// and of a waiter), which is what a missing permission would break. The
// full run (scripts/test) runs every case.
var restrictedCases = []string{
	"TryAcquire", "AcquireBlocksUntilRelease", "CancelWhileWaiting", "ReleaseIdempotent",
	"Errors", "ElectionValueInStatus", "ElectionResignHandsOver", "Unavailable",
	"Loss", "WaiterRevoked",
}

// RestrictedUserRun is the conformance.Run options of a suite run as a
// restricted user: every case, or under -short (the quick tier) the cases
// that send every kind of request.
func RestrictedUserRun() []conformance.RunOption {
	if !testing.Short() {
		return nil
	}
	return []conformance.RunOption{conformance.OnlyCases(restrictedCases...)}
}
