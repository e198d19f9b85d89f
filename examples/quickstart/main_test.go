package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

func TestQuickstartOnMem(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), "mem://quickstart", &out))
	assert.Contains(t, out.String(), "late write with the first token: fencing: stale token")
}

// The example runs on every backend of the module, each a real local server.
func TestQuickstartOnEveryBackend(t *testing.T) {
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"etcd", func(t *testing.T) string {
			return "etcd://" + strings.TrimPrefix(etcdtest.Start(t).Endpoints()[0], "http://") + "/quickstart"
		}},
		{"zk", func(t *testing.T) string { return "zk://" + zktest.Start(t).Addr() + "/quickstart" }},
		{"redis", func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr() + "?prefix=quickstart" }},
		{"postgres", func(t *testing.T) string { return pgtest.Start(t).NewDatabase(t) + "&prefix=quickstart" }},
	} {
		t.Run(b.name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(context.Background(), b.url(t), &out), out.String())
			assert.Equal(t, 2, strings.Count(out.String(), "acquired \"quickstart\" with token "), out.String())
			assert.Contains(t, out.String(), "late write with the first token: fencing: stale token")
		})
	}
}

func TestQuickstartBadURL(t *testing.T) {
	err := run(context.Background(), "nosuch://", &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, fmt.Sprint(err), "unknown scheme")
}
