package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/etcdtest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/zktest"
)

// check runs the timeline on url and checks what it shows: the paused old
// leader's write is rejected after the failover and leaves nothing, and
// one replica leads at a time.
func check(t *testing.T, url string, ttl time.Duration) {
	var out bytes.Buffer
	res, err := run(context.Background(), url, ttl, &out)
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())

	// Each handover is to a later term; the paused leader's late write is
	// refused for the term elected while it was paused.
	assert.Greater(t, res.Paused, res.Resigned)
	assert.Greater(t, res.Next, res.Paused)
	var stale *fencing.StaleTokenError
	require.ErrorAs(t, res.Late, &stale, out.String())
	assert.Equal(t, res.Paused, stale.Token)
	assert.GreaterOrEqual(t, stale.Highest, res.Next)

	// One leader at a time: the journal's entries are numbered in order,
	// their terms never go back, and each term is one replica's.
	writer := map[fencing.Token]string{}
	var last fencing.Token
	for i, e := range res.Journal {
		require.Equal(t, i+1, e.Seq)
		require.GreaterOrEqual(t, e.Token, last, "entry %d: a term older than the previous entry's", e.Seq)
		if by, ok := writer[e.Token]; ok {
			require.Equal(t, by, e.By, "term %s written by two replicas", e.Token)
		}
		writer[e.Token], last = e.By, e.Token
	}
	// Nothing of the paused leader's is after the first entry of the term
	// that replaced it.
	firstNext := -1
	for i, e := range res.Journal {
		if e.Token == res.Next && firstNext < 0 {
			firstNext = i
		}
		if firstNext >= 0 {
			require.NotEqual(t, res.Paused, e.Token, "entry %d of the paused term kept after the next term wrote", e.Seq)
		}
	}
	require.GreaterOrEqual(t, firstNext, 0)
	for _, tok := range []fencing.Token{res.Resigned, res.Paused, res.Next} {
		assert.Contains(t, writer, tok)
	}

	// The observer saw the terms in order, each with its leader's value.
	var seen []fencing.Token
	for i, l := range res.Observed {
		if i > 0 {
			require.Greater(t, l.Token, res.Observed[i-1].Token, "observed terms out of order: %v", res.Observed)
		}
		if by, ok := writer[l.Token]; ok {
			assert.Equal(t, by, l.Value, "term %s", l.Token)
		}
		seen = append(seen, l.Token)
	}
	assert.Subset(t, seen, []fencing.Token{res.Resigned, res.Paused, res.Next})
}

func TestSingletonOnMem(t *testing.T) { check(t, "mem://singleton-test", time.Second) }

func TestSingletonOnEtcd(t *testing.T) {
	host := strings.TrimPrefix(etcdtest.Start(t).Endpoints()[0], "http://")
	check(t, "etcd://"+host+"/singleton", 2*time.Second)
}

func TestSingletonOnZooKeeper(t *testing.T) {
	check(t, "zk://"+zktest.Start(t).Addr()+"/singleton?ttl=2s", 2*time.Second)
}

func TestSingletonOnRedis(t *testing.T) {
	check(t, "redis://"+redistest.Start(t).Addr()+"/0?prefix=singleton", time.Second)
}

func TestSingletonOnPostgres(t *testing.T) {
	check(t, pgtest.Start(t).NewDatabase(t)+"&prefix=singleton", time.Second)
}

func TestSingletonBadURL(t *testing.T) {
	_, err := run(context.Background(), "nosuch://", time.Second, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, fmt.Sprint(err), "unknown scheme")
}
