package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// faultResult is the fault-isolation case: one sweep in which one chunk's
// script call fails, for lockwatch and for a Redisson-style renewer.
type faultResult struct {
	Locks     int       `json:"locks"`
	Lockwatch faultSide `json:"lockwatch"`
	Redisson  faultSide `json:"redisson_style"`
}

type faultSide struct {
	// BaselineMS is the median sweep without a fault.
	BaselineMS float64 `json:"baseline_ms"`
	// FailedLocks is how many locks the failing chunk carried.
	FailedLocks int `json:"failed_locks"`
	// RenewedInTick is how many locks the faulty sweep renewed.
	RenewedInTick int `json:"renewed_in_tick"`
	// HealthyDoneMS is from the start of the faulty sweep to the answer
	// of the last chunk that did not fail.
	HealthyDoneMS float64 `json:"healthy_done_ms"`
	// RetriedMS is from the start of the faulty sweep until the failing
	// chunk's locks were renewed by a retry (lockwatch's fast lane); 0
	// when nothing retries them before the next tick.
	RetriedMS float64 `json:"retried_ms"`
}

// errInjected is an error reply of Redis to one renew call (a script error,
// say): the endpoint answers, and its other calls go on.
var errInjected error = replyError("ERR injected chunk failure")

type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// chunkFault fails the first renew script call that names key, once, after
// Redis answered it, and records when pipelines answered.
type chunkFault struct {
	key     string
	armed   atomic.Bool
	failed  atomic.Int64 // keys in the failed call
	lastEnd atomic.Int64 // unix ns of the latest pipeline answer
}

func (f *chunkFault) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is for a renew call sent on its own (a pipeline of one call).
func (f *chunkFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	pipe := f.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		return next(ctx, cmds[0])
	})
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := pipe(ctx, []redis.Cmder{cmd}); err != nil {
			return err
		}
		return cmd.Err() // go-redis sets a command's error to what its hook returns
	}
}

func (f *chunkFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if f.armed.Load() {
			for _, cmd := range cmds {
				if keys := scriptKeys(cmd.Args()); keys != nil && containsKey(keys, f.key) && f.armed.CompareAndSwap(true, false) {
					cmd.SetErr(errInjected)
					f.failed.Store(int64(len(keys)))
				}
			}
		}
		now := time.Now().UnixNano()
		for {
			cur := f.lastEnd.Load()
			if now <= cur || f.lastEnd.CompareAndSwap(cur, now) {
				break
			}
		}
		return err
	}
}

// scriptKeys returns the keys of an EVAL or EVALSHA command.
func scriptKeys(args []any) []any {
	if len(args) < 3 {
		return nil
	}
	var n int64
	switch v := args[2].(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case string:
		n, _ = strconv.ParseInt(v, 10, 64)
	}
	if n <= 0 || int(n) > len(args)-3 {
		return nil
	}
	return args[3 : 3+n]
}

func containsKey(keys []any, key string) bool {
	for _, k := range keys {
		if fmt.Sprint(k) == key { // lockwatch passes keys as pointers that print as the key
			return true
		}
	}
	return false
}

func spawnFault(ctx context.Context, addr string, n int) (faultResult, error) {
	var f faultResult
	err := spawnJSON(ctx, []string{"-child", "fault", "-n", strconv.Itoa(n), "-redis", addr}, &f)
	return f, err
}

func runFault(ctx context.Context, addr string, n, sweeps int) (faultResult, error) {
	res := faultResult{Locks: n}
	var err error
	if res.Lockwatch, err = faultLockwatch(ctx, addr, n, sweeps); err != nil {
		return res, err
	}
	obs := redis.NewClient(&redis.Options{Addr: addr})
	defer obs.Close()
	if err := obs.FlushAll(ctx).Err(); err != nil {
		return res, err
	}
	if res.Redisson, err = faultRedisson(ctx, addr, n, sweeps); err != nil {
		return res, err
	}
	return res, nil
}

func faultLockwatch(ctx context.Context, addr string, n, sweeps int) (faultSide, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		return faultSide{}, err
	}
	fault := &chunkFault{key: lockKey("fl", n/2)}
	rdb.AddHook(fault)
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule(lockwatchSchedule))
	if err != nil {
		return faultSide{}, err
	}
	defer wd.Stop()
	if _, err := obtainAll(ctx, rdb, "fl", n, nil); err != nil {
		return faultSide{}, err
	}
	var base []float64
	for range sweeps {
		t := time.Now()
		if err := wd.Sweep(ctx); err != nil {
			return faultSide{}, err
		}
		base = append(base, ms(time.Since(t)))
	}
	renewed := wd.Stats().Renewals
	fault.armed.Store(true)
	start := time.Now()
	err = wd.Sweep(ctx)
	if !errors.Is(err, errInjected) {
		return faultSide{}, fmt.Errorf("faulty sweep returned %v, want the injected error", err)
	}
	side := faultSide{
		BaselineMS:    median(base),
		FailedLocks:   int(fault.failed.Load()),
		RenewedInTick: int(wd.Stats().Renewals - renewed),
		HealthyDoneMS: ms(time.Unix(0, fault.lastEnd.Load()).Sub(start)),
	}
	// The failed chunk's locks are retried by the fast lane.
	deadline := time.Now().Add(30 * time.Second)
	for wd.Stats().Renewals-renewed < int64(n) {
		if time.Now().After(deadline) {
			return side, fmt.Errorf("the failed chunk's %d locks were not retried within 30 s", side.FailedLocks)
		}
		time.Sleep(time.Millisecond)
	}
	side.RetriedMS = ms(time.Since(start))
	return side, nil
}

func faultRedisson(ctx context.Context, addr string, n, sweeps int) (faultSide, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()
	table, _, err := setLocks(ctx, rdb, "fr", n)
	if err != nil {
		return faultSide{}, err
	}
	if err := redissonScript.Load(ctx, rdb).Err(); err != nil {
		return faultSide{}, err
	}
	var base []float64
	for range sweeps {
		t := time.Now()
		if _, err := redissonSweep(ctx, rdb, table, nil); err != nil {
			return faultSide{}, err
		}
		base = append(base, ms(time.Since(t)))
	}
	chunks := (n + redissonChunk - 1) / redissonChunk
	bad := chunks / 2
	start := time.Now()
	renewed, err := redissonSweep(ctx, rdb, table, func(i int) error {
		if i == bad {
			return errInjected
		}
		return nil
	})
	if !errors.Is(err, errInjected) {
		return faultSide{}, fmt.Errorf("faulty sweep returned %v, want the injected error", err)
	}
	return faultSide{
		BaselineMS:    median(base),
		FailedLocks:   min(redissonChunk, n-bad*redissonChunk),
		RenewedInTick: renewed,
		HealthyDoneMS: ms(time.Since(start)),
	}, nil
}

func printFault(w io.Writer, f faultResult) {
	fmt.Fprintf(w, "\nfault isolation at %d locks: one chunk's script call fails in one sweep\n", f.Locks)
	l, r := f.Lockwatch, f.Redisson
	fmt.Fprintf(w, "  lockwatch:      failed chunk %d locks; renewed in that sweep %d of %d (all others); last healthy chunk answered %.1f ms after the start (sweep without fault %.1f ms); failed chunk renewed by the fast lane %.0f ms after the start\n",
		l.FailedLocks, l.RenewedInTick, f.Locks, l.HealthyDoneMS, l.BaselineMS, l.RetriedMS)
	fmt.Fprintf(w, "  redisson-style: failed chunk %d locks; renewed in that sweep %d of %d (the tick ends at the failed chunk); %d locks wait for the next tick\n",
		r.FailedLocks, r.RenewedInTick, f.Locks, f.Locks-r.RenewedInTick)
}
