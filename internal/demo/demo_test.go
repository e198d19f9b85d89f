package demo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend/mem"
	"github.com/fencelock/fencelock/internal/demo"
)

func TestTimelineOnMem(t *testing.T) {
	for _, freeze := range []bool{true, false} {
		srv := mem.NewServer()
		connA := srv.Connect()
		a, err := mem.New(connA)
		require.NoError(t, err)
		b, err := mem.New(srv.Connect())
		require.NoError(t, err)
		clientA := demo.Client{Locker: a}
		if freeze {
			clientA.Freeze = connA.Cut
		}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := demo.Run(ctx, &out, clientA, demo.Client{Locker: b}, "report", 300*time.Millisecond)
		cancel()
		require.NoError(t, err, out.String())
		assert.True(t, res.StaleRejected, out.String())
		assert.Greater(t, res.TokenB, res.TokenA)
		assert.Equal(t, "report by B", res.Final)
		assert.Contains(t, out.String(), "rejects A's write")
		_ = a.Close()
		require.NoError(t, b.Close())
	}
}
