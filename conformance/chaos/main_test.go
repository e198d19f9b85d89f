package chaos_test

import (
	"os"
	"testing"

	_ "github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/conformance/chaos"
	_ "github.com/fencelock/fencelock/etcd"
	_ "github.com/fencelock/fencelock/postgres"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

// TestMain runs the campaigns' workers: each is this test binary,
// re-executed.
func TestMain(m *testing.M) {
	chaos.WorkerMain()
	os.Exit(m.Run())
}
