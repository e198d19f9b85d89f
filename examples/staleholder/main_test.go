package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

func check(t *testing.T, url string, ttl time.Duration) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var out bytes.Buffer
	res, err := run(context.Background(), url, dsn, t.TempDir(), ttl, &out)
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())
	assert.Greater(t, res.TokenB, res.TokenA)
	assert.True(t, res.RowRejected, out.String())
	assert.True(t, res.FileRejected, out.String())
	assert.Equal(t, "report by B", res.Row)
	assert.Equal(t, "report by B", res.File)
}

func TestStaleHolderOnMem(t *testing.T) { check(t, "mem://staleholder-test", 300*time.Millisecond) }

func TestStaleHolderOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	host := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	check(t, "etcd://"+host+"/locks", 2*time.Second)
}

func TestStaleHolderOnZooKeeper(t *testing.T) {
	check(t, "zk://"+zktest.Start(t).Addr()+"/locks?ttl=2s", 2*time.Second)
}

func TestStaleHolderOnRedis(t *testing.T) {
	check(t, "redis://"+redistest.Start(t).Addr()+"/0", 500*time.Millisecond)
}

func TestStaleHolderOnPostgres(t *testing.T) {
	check(t, pgtest.Start(t).NewDatabase(t)+"&prefix=locks", 500*time.Millisecond)
}
