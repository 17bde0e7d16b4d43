package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownedTable is what a renewer that does not watch the client keeps: each
// lock's key and value, as a map like Redisson's renewal map.
type ownedTable map[string]string

// setLocks creates n lock keys with random values through c, pipelined, and
// returns them as a table.
func setLocks(ctx context.Context, c *redis.Client, prefix string, n int) (ownedTable, int64, error) {
	t := make(ownedTable, n)
	var kv int64
	buf := make([]byte, 16)
	for start := 0; start < n; start += ceilingBatch {
		pipe := c.Pipeline()
		for i := start; i < min(n, start+ceilingBatch); i++ {
			if _, err := rand.Read(buf); err != nil {
				return nil, 0, err
			}
			k, v := lockKey(prefix, i), base64.RawURLEncoding.EncodeToString(buf)
			t[k] = v
			kv += int64(len(k) + len(v))
			pipe.SetNX(ctx, k, v, lockTTL)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, 0, fmt.Errorf("create locks: %w", err)
		}
	}
	return t, kv, nil
}

// tableBench is a renewer that keeps its own table of locks and renews it
// with sweep, on one connection.
type tableBench struct {
	obs, rdb *redis.Client
	table    ownedTable
	n        int
	mem, kv  int64
	impl     string
	renew    func(context.Context, *redis.Client, ownedTable, func(int) error) (int, error)
}

func setupTable(ctx context.Context, addr, prefix string, n int, impl string,
	renew func(context.Context, *redis.Client, ownedTable, func(int) error) (int, error)) (bench, error) {
	b := &tableBench{
		obs:   redis.NewClient(&redis.Options{Addr: addr}),
		rdb:   redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1}), // one connection
		n:     n,
		impl:  impl,
		renew: renew,
	}
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		b.close()
		return nil, err
	}
	before := liveBytes()
	var err error
	if b.table, b.kv, err = setLocks(ctx, b.rdb, prefix, n); err != nil {
		b.close()
		return nil, err
	}
	b.mem = liveBytes() - before
	for _, s := range []*redis.Script{redissonScript, ceilingScript} {
		if err := s.Load(ctx, b.rdb).Err(); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *tableBench) sweep(ctx context.Context) (sample, error) {
	m, err := startMeter(ctx, b.obs)
	if err != nil {
		return sample{}, err
	}
	renewed, err := b.renew(ctx, b.rdb, b.table, nil)
	if err != nil {
		return sample{}, err
	}
	s, err := m.stop(ctx, time.Now())
	if err != nil {
		return sample{}, err
	}
	if renewed != b.n {
		return sample{}, fmt.Errorf("%s renewed %d locks, want %d", b.impl, renewed, b.n)
	}
	return s, nil
}

func (b *tableBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
	}
}

func (b *tableBench) close() {
	_ = b.rdb.Close()
	_ = b.obs.Close()
}
