package fencing_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// A lost answer is its own outcome: it matches ErrOutcomeUnknown and the
// underlying error, never ErrStaleToken, and telemetry counts it as
// unknown.
func TestOutcomeUnknownError(t *testing.T) {
	var err error = &fencing.OutcomeUnknownError{Resource: "doc", Token: 5, Err: io.EOF}
	if !errors.Is(err, fencing.ErrOutcomeUnknown) || !errors.Is(err, io.EOF) {
		t.Fatalf("%v: want a match for ErrOutcomeUnknown and io.EOF", err)
	}
	if errors.Is(err, fencing.ErrStaleToken) || errors.Is(err, context.Canceled) {
		t.Fatalf("%v matches what it is not", err)
	}
	if want := `fencing: outcome unknown of the write with token 5 for "doc" (it may have landed): EOF`; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	for _, c := range []struct {
		err  error
		want fencing.Decision
	}{
		{nil, fencing.DecisionAccepted},
		{&fencing.StaleTokenError{Resource: "doc", Token: 4, Highest: 5}, fencing.DecisionStale},
		{err, fencing.DecisionUnknown},
		{io.EOF, fencing.DecisionError},
	} {
		if got := fencing.DecisionOf(c.err); got != c.want {
			t.Errorf("DecisionOf(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
