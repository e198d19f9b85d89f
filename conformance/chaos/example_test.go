package chaos_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock/conformance/chaos"
)

// A campaign against a cluster of your own: client faults only, the
// counter guarded by a file under the output directory. The program must
// call chaos.WorkerMain first thing in main (here TestMain does).
func ExampleRun() {
	res, err := chaos.Run(context.Background(), chaos.Config{
		URL:      "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/chaos",
		Duration: 5 * time.Minute,
		Out:      "chaos-report",
		Log:      os.Stderr,
	})
	if res != nil {
		_ = res.Summary.WriteText(os.Stdout) // the checker's table; the HTML report is in res.Dir
	}
	if err != nil {
		fmt.Println(err) // a violation wraps chaos.ErrViolation
	}
}
