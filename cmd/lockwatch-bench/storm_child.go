package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// stormProc is one run's process: the application's client, the spy, and
// with lockwatch the registry and watchdog.
type stormProc struct {
	mode, pool string
	rdb, spy   *redis.Client
	st         *stormState
	wd         *watchdog.Watchdog // nil without lockwatch
	heads      *headrooms
	fastMax    int
	stopped    bool // stopWD was called
}

// runStorm is one run of the storm case, in a child process: impl is
// "storm-<mode>-<pool>".
func runStorm(ctx context.Context, addr string, n int, impl string) (stormRun, error) {
	mode, pool, _ := strings.Cut(strings.TrimPrefix(impl, "storm-"), "-")
	run := stormRun{Pool: pool, Mode: mode, LoadAvg: [2]float64{loadAvg(), 0}}
	if mode != modeWith && mode != modeWithout {
		return run, fmt.Errorf("-child %s: unknown mode %q", impl, mode)
	}
	opts, err := neighbourOptions(addr, pool)
	if err != nil {
		return run, err
	}
	p := &stormProc{mode: mode, pool: pool, rdb: redis.NewClient(opts), spy: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})}
	defer p.rdb.Close()
	defer p.spy.Close()
	run.PoolSize, run.PoolTimeoutMS = p.rdb.Options().PoolSize, ms(p.rdb.Options().PoolTimeout)
	p.st = newStormState("st"+mode[:2]+pool[:1], n, newLocker(storm.lib, p.rdb, storm.ttl))
	if mode == modeWith {
		reg := registry.New(bsmredislock.New(), goredsync.New())
		if err := reg.Watch(p.rdb); err != nil {
			return run, err
		}
		if p.wd, err = watchdog.Attach(reg, watchdog.WithOnLost(p.st.onLostReport)); err != nil {
			return run, err
		}
		defer p.stopWD(&run) // on an error; measure stops it itself
		p.heads = newHeadrooms()
		p.wd.AddObserver(p.heads)
	}
	if err := p.measure(ctx, &run); err != nil {
		return run, err
	}
	run.LoadAvg[1] = loadAvg()
	return run, nil
}

// measure runs the storm with the application's streams, the poller and
// the stats sampler beside it, then releases every lock.
func (p *stormProc) measure(ctx context.Context, run *stormRun) error {
	stopProfile, err := startProfile(p.mode, p.pool)
	if err != nil {
		return err
	}
	m, err := startMeter(ctx, p.spy)
	if err != nil {
		stopProfile()
		return err
	}
	pt := p.rdb.PoolStats().Timeouts
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var closed, open []opSample
	wg.Add(3)
	go func() { defer wg.Done(); closed, open = appStreams(ctx, p.rdb, stop) }()
	go func() {
		defer wg.Done()
		if storm.poll > 0 {
			run.Polls = p.st.poll(ctx, p.spy, stop)
		}
	}()
	go func() { defer wg.Done(); p.sample(stop) }()

	p.waves(ctx, run)
	close(stop)
	wg.Wait()
	s, err := m.stop(ctx, time.Now())
	stopProfile()
	if err != nil {
		return err
	}
	run.ClientCPUS, run.ServerCPUS = s.clientCPU.Seconds(), s.serverCPU.Seconds()
	run.PoolTimeouts = int64(p.rdb.PoolStats().Timeouts - pt)
	run.Closed, run.Open = summarizeOps(closed), summarizeOps(open)

	forSlots(p.st.all(), func(i int) { p.st.releaseSlot(ctx, i, false) })
	if p.wd != nil {
		p.stopWD(run) // OnLost reports on their way are made
		run.Watchdog = p.watchdogFigures(s.wall)
	}
	p.st.tally(run)
	return nil
}

// stormStopWait bounds how long a run waits for the watchdog's Stop.
const stormStopWait = 30 * time.Second

// stopWD stops the watchdog, once, waiting at most stormStopWait: a Stop
// that does not return is recorded in run (its goroutine is left; the
// process ends with the run).
func (p *stormProc) stopWD(run *stormRun) {
	if p.wd == nil || p.stopped {
		return
	}
	p.stopped = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.wd.Stop()
	}()
	select {
	case <-done:
	case <-time.After(stormStopWait):
		run.StopHung = true
	}
}

// waves obtains every lock in a burst, then releases and obtains a third
// of them again every storm.wave until storm.duration has passed since
// the burst began. A wave that has not begun by then is not run (waves
// that take longer than storm.wave begin late, one after the other).
func (p *stormProc) waves(ctx context.Context, run *stormRun) {
	start := time.Now()
	run.BurstS = forSlots(p.st.all(), func(i int) { p.st.obtain(ctx, i, false) }).Seconds()
	end := start.Add(storm.duration)
	for k := 0; ; k++ {
		next := start.Add(time.Duration(k+1) * storm.wave)
		if !next.Before(end) || !time.Now().Before(end) {
			break
		}
		time.Sleep(time.Until(next))
		run.WavesS = append(run.WavesS, p.st.wave(ctx, k).Seconds())
	}
	time.Sleep(time.Until(end))
}

// sample keeps the largest fast lane the watchdog's Stats showed.
func (p *stormProc) sample(stop <-chan struct{}) {
	if p.wd == nil {
		return
	}
	t := time.NewTicker(stormStatsEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.fastMax = max(p.fastMax, p.wd.Stats().FastLane)
		}
	}
}

// watchdogFigures is the watchdog's Stats, once stopped, over a run of
// wall.
func (p *stormProc) watchdogFigures(wall time.Duration) *stormWatchdog {
	s := p.wd.Stats()
	w := &stormWatchdog{
		Renewals: s.Renewals, Failures: s.Failures, RenewErrors: s.RenewErrors, Lost: s.Lost,
		Gone: s.Losses.Gone, Taken: s.Losses.Taken, Unreachable: s.Losses.Unreachable, MaxHold: s.Losses.MaxHold,
		FastLaneMax: p.fastMax,
	}
	w.DeadlinesMissed, w.Hedges, w.Unconfirmed, w.SpareCalls = s.DeadlinesMissed, s.Hedges, s.Unconfirmed, s.SpareCalls
	for _, ep := range s.Endpoints {
		if ep.LastError != nil {
			w.LastError = ep.LastError.Error()
		}
	}
	if wall > 0 {
		w.RenewalsPerSec = float64(s.Renewals) / wall.Seconds()
	}
	p.heads.fill(w)
	return w
}

// appStreams runs the application on c until stop is closed: stormClosed
// goroutines of GET/SET back to back, and one stream with a command due
// every stormOpenEvery. It returns their samples.
func appStreams(ctx context.Context, c *redis.Client, stop <-chan struct{}) (closed, open []opSample) {
	val := strings.Repeat("v", 64)
	cmd := func(key string) func(ctx context.Context, k int) error {
		return func(ctx context.Context, k int) error {
			if k%2 == 0 {
				return c.Set(ctx, key, val, 0).Err()
			}
			return c.Get(ctx, key).Err()
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range stormClosed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := timeLoop(ctx, stop, 0, cmd(fmt.Sprintf("bench:st:app:%d", g)))
			mu.Lock()
			closed = append(closed, ops...)
			mu.Unlock()
		}()
	}
	open = timeLoop(ctx, stop, stormOpenEvery, cmd("bench:st:app:open"))
	wg.Wait()
	return closed, open
}

// startProfile writes a CPU profile of the run to -storm-profile's
// directory, if given; the returned function ends it.
func startProfile(mode, pool string) (func(), error) {
	if storm.profile == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(storm.profile, fmt.Sprintf("storm-%s-%s-%s.pprof", storm.lib, mode, pool)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	runtime.MemProfileRate = 64 << 10
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		// The allocations of the run, and the GC cycles it made.
		if h, err := os.Create(filepath.Join(storm.profile, fmt.Sprintf("storm-%s-%s-%s.allocs", storm.lib, mode, pool))); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(h, 0)
			h.Close()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		_ = os.WriteFile(filepath.Join(storm.profile, fmt.Sprintf("storm-%s-%s-%s.gc", storm.lib, mode, pool)),
			[]byte(fmt.Sprintf("gc cycles %d, heap in use %d MiB, allocated %d MiB, gc cpu fraction %.3f\n", ms.NumGC, ms.HeapInuse>>20, ms.TotalAlloc>>20, ms.GCCPUFraction)), 0o644)
	}, nil
}
