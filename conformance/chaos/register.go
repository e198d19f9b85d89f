package chaos

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The guarded counter is checked by porcupine as a fenced register: its
// state is the value and the highest token admitted; an admit or a write
// with a token not lower than the highest is accepted and raises it (a
// write also sets the value), a lower one is rejected as stale, a read
// returns the value. A step that failed otherwise, or never returned, may
// have taken effect at any time after its invocation, or never.

type regState struct {
	value   int64
	highest uint64
}

type regInput struct {
	op    string
	token uint64
	value int64 // written
}

type regOutput struct {
	phase string // ok, stale, or error: unknown
	value int64  // read
}

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		fresh := in.token >= s.highest
		next := s
		switch in.op {
		case opRead:
			if out.value == s.value {
				return []any{s}
			}
			return nil
		case opAdmit:
			next.highest = in.token
		case opWrite:
			next.highest, next.value = in.token, in.value
		}
		switch {
		case out.phase == phaseOK && fresh:
			return []any{next}
		case out.phase == phaseStale && !fresh:
			return []any{s}
		case out.phase == phaseError && fresh:
			return []any{s, next}
		case out.phase == phaseError:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case in.op == opRead:
			return fmt.Sprintf("read → %d", out.value)
		case in.op == opAdmit:
			return fmt.Sprintf("admit #%d → %s", in.token, out.phase)
		}
		return fmt.Sprintf("write %d #%d → %s", in.value, in.token, out.phase)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("%d, highest #%d", s.value, s.highest)
	},
}

// checkTimeout bounds porcupine's search; past it the verdict is unknown.
const checkTimeout = 2 * time.Minute

// registerOps are the counter's steps as porcupine operations: reads that
// failed are left out (they change nothing), and a step that failed
// otherwise or never returned stays open to the end.
func registerOps(h *history) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, s := range h.steps {
		if s.op != opAdmit && s.op != opRead && s.op != opWrite {
			continue
		}
		known := s.answered && (s.phase == phaseOK || s.phase == phaseStale)
		if s.op == opRead && (!known || s.phase != phaseOK) {
			continue
		}
		out := regOutput{phase: s.phase, value: s.value}
		ret := s.ret
		if !known {
			out.phase, ret = phaseError, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{
			ClientId: s.worker,
			Input:    regInput{op: s.op, token: s.token, value: s.value},
			Call:     s.call, Output: out, Return: ret,
		})
	}
	return ops
}

// linearizable runs porcupine over the counter's steps.
func linearizable(h *history) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(registerModel.ToModel(), registerOps(h), checkTimeout)
}
