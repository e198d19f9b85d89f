package election

import (
	"testing"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

func holder(tok uint64, value, id string) backend.Status {
	return backend.Status{Holder: &backend.Entry{ID: id, Token: fencing.Token(tok), Value: value}}
}

// The observer's order: what it delivers for a sequence of reads.
func TestObserverOrder(t *testing.T) {
	none := backend.Status{}
	unknown := backend.ErrUnavailable
	type read struct {
		st      backend.Status
		err     error
		deliver bool
	}
	cases := map[string][]read{
		"an older term after a newer one is skipped": {
			{holder(5, "a", "x"), nil, true}, {holder(7, "b", "y"), nil, true}, {holder(5, "a", "x"), nil, false},
		},
		"a term seen to end is not shown again": {
			{holder(5, "a", "x"), nil, true}, {none, nil, true}, {holder(5, "a", "x"), nil, false}, {holder(6, "b", "y"), nil, true},
		},
		"the same term after unknown is shown again": {
			{holder(5, "a", "x"), nil, true}, {none, unknown, true}, {none, unknown, false}, {holder(5, "a", "x"), nil, true},
		},
		"a new value of the same term is shown": {
			{holder(5, "a", "x"), nil, true}, {holder(5, "a", "x"), nil, false}, {holder(5, "a2", "x"), nil, true},
		},
		"another library's leader, token zero, is shown": {
			{holder(5, "a", "x"), nil, true}, {holder(0, "", "foreign"), nil, true}, {holder(5, "a", "x"), nil, false},
			{none, nil, true}, {holder(0, "", "other"), nil, true}, {holder(9, "c", "z"), nil, true},
		},
		"no leader is shown once": {
			{none, nil, true}, {none, nil, false}, {none, unknown, true}, {none, nil, true},
		},
	}
	for name, reads := range cases {
		t.Run(name, func(t *testing.T) {
			var o observer
			for i, r := range reads {
				obs, ok := o.next("n", r.st, r.err)
				if ok != r.deliver {
					t.Fatalf("read %d (%+v, %v): delivered %v, want %v", i, r.st.Holder, r.err, ok, r.deliver)
				}
				if ok && (r.err != nil) != (obs.Err != nil) {
					t.Fatalf("read %d: observation %+v for error %v", i, obs, r.err)
				}
			}
		})
	}
}
