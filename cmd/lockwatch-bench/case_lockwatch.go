package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
	"github.com/redis/go-redis/v9"
)

// lockwatchBench is locks obtained through redislock on a watched client
// and renewed by a watchdog, swept with Sweep.
type lockwatchBench struct {
	obs, rdb  *redis.Client
	wd        *watchdog.Watchdog
	n         int
	mem, kv   int64
	setupPeak float64 // peak RSS after the locks were obtained, MB
}

func setupLockwatch(ctx context.Context, addr, prefix string, n int) (bench, error) {
	b := &lockwatchBench{
		obs: redis.NewClient(&redis.Options{Addr: addr}),
		rdb: redis.NewClient(&redis.Options{Addr: addr}),
		n:   n,
	}
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(b.rdb); err != nil {
		b.close()
		return nil, err
	}
	var err error
	if b.wd, err = watchdog.Attach(reg, watchdog.WithSchedule(lockwatchSchedule)); err != nil {
		b.close()
		return nil, err
	}
	if err := warm(ctx, b.rdb, obtainWorkers); err != nil {
		b.close()
		return nil, err
	}
	before := liveBytes()
	// The application keeps its *redislock.Lock values in both designs;
	// here they are dropped, so the figure is what the registry keeps
	// (with the key and value strings, which the application shares).
	if b.kv, err = obtainAll(ctx, b.rdb, prefix, n, nil); err != nil {
		b.close()
		return nil, err
	}
	b.mem = liveBytes() - before
	b.setupPeak = peakRSSMB()
	if got := reg.Len(); got != n {
		b.close()
		return nil, fmt.Errorf("registry tracks %d locks, want %d", got, n)
	}
	return b, nil
}

func (b *lockwatchBench) sweep(ctx context.Context) (sample, error) {
	renewed := b.wd.Stats().Renewals
	m, err := startMeter(ctx, b.obs)
	if err != nil {
		return sample{}, err
	}
	if err := b.wd.Sweep(ctx); err != nil {
		return sample{}, fmt.Errorf("sweep: %w", err)
	}
	s, err := m.stop(ctx, time.Now())
	if err != nil {
		return sample{}, err
	}
	if got := b.wd.Stats().Renewals - renewed; got != int64(b.n) {
		return sample{}, fmt.Errorf("a sweep renewed %d locks, want %d", got, b.n)
	}
	return s, nil
}

func (b *lockwatchBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
		Note:          fmt.Sprintf("peak RSS %.0f MB once the locks were obtained, before any sweep", b.setupPeak),
	}
}

func (b *lockwatchBench) close() {
	if b.wd != nil {
		b.wd.Stop()
	}
	_ = b.rdb.Close()
	_ = b.obs.Close()
}
