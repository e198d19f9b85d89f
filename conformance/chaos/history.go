package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// The steps a worker records, and the nemesis's records.
const (
	opAcquire = "acquire"
	opAdmit   = "admit"
	opRead    = "read"
	opWrite   = "write"
	opRelease = "release"
	opLost    = "lost"  // the lease's loss signal fired before Release
	opFault   = "fault" // a fault began (Phase "start") or ended ("end")
	opStart   = "start" // a worker process started
	opExit    = "exit"  // a worker process ended
)

// The phases of a record: a step's invocation, then its outcome.
const (
	phaseInvoke = "invoke"
	phaseOK     = "ok"
	phaseStale  = "stale" // the guard rejected the token
	phaseError  = "error" // failed otherwise: the outcome is unknown
	phaseStart  = "start"
	phaseEnd    = "end"
)

// Event is one line of history.jsonl. Times are Unix nanoseconds on this
// machine's clock (every worker runs here); tokens are decimal strings, as
// JSON numbers lose precision above 2^53.
type Event struct {
	Worker int    `json:"worker"`                 // worker number; -1 for a fault on no worker
	Op     string `json:"op"`                     // acquire, admit, read, write, release, lost, fault, start, exit
	Seq    int64  `json:"seq,omitempty"`          // the step's number within its worker: an invocation and its outcome share it
	Phase  string `json:"phase"`                  // invoke, ok, stale, error; start, end for faults
	Time   int64  `json:"time"`                   // Unix nanoseconds
	Token  uint64 `json:"token,omitempty,string"` // the fencing token granted, or written with
	Value  int64  `json:"value,omitempty"`        // the counter read, or written
	Fault  Fault  `json:"fault,omitempty"`        // the fault's kind (op fault)
	Target string `json:"target,omitempty"`       // a fault's member, or its detail
	Err    string `json:"err,omitempty"`          // the error of a failed step or fault
}

// ReadHistory reads a history.jsonl file.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readEvents(f)
}

func readEvents(r io.Reader) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return evs, fmt.Errorf("chaos: history line %d: %w", n, err)
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}
