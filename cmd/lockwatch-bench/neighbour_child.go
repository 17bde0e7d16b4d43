package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
	"github.com/redis/go-redis/v9"
)

// neighbourChild is one pool configuration's process's answer.
type neighbourChild struct {
	Pool          string          `json:"pool"`
	PoolSize      int             `json:"pool_size"`
	PoolTimeoutMS float64         `json:"pool_timeout_ms"`
	Blocks        []nbBlock       `json:"blocks"`
	Sweeps        []window        `json:"sweeps"`
	With          neighbourMode   `json:"with"`
	Without       neighbourMode   `json:"without"`
	Renewals      int64           `json:"renewals"`
	Lost          int64           `json:"lost"`
	Losses        watchdog.Losses `json:"losses"`
	Trouble       nbTrouble       `json:"trouble"`
	ObtainNS      int64           `json:"obtain_ns"`
	Error         string          `json:"error,omitempty"`
}

// sweepLog is an observer that records when sweeps ran.
type sweepLog struct {
	mu      sync.Mutex
	windows []window // guarded by mu
}

var _ watchdog.Observer = (*sweepLog)(nil)

func (*sweepLog) Renewed(string, int, float64)   {}
func (*sweepLog) RenewFailed(string, int, error) {}
func (*sweepLog) Lost(registry.Lock, error)      {}
func (s *sweepLog) Swept(_ string, d time.Duration) {
	end := time.Now().UnixNano()
	s.mu.Lock()
	s.windows = append(s.windows, window{end - int64(d), end})
	s.mu.Unlock()
}

func (s *sweepLog) reset() {
	s.mu.Lock()
	s.windows = nil
	s.mu.Unlock()
}

func (s *sweepLog) snapshot() []window {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.windows)
	slices.SortFunc(out, func(a, b window) int { return int(a[1] - b[1]) })
	return out
}

// runNeighbour is one pool configuration's process: see the neighbour case
// above.
func runNeighbour(ctx context.Context, addr string, n int, pool string) (neighbourChild, error) {
	out := neighbourChild{Pool: pool}
	opts, err := neighbourOptions(addr, pool)
	if err != nil {
		return out, err
	}
	p := &nbProcess{rdb: redis.NewClient(opts)}
	defer p.rdb.Close()
	out.PoolSize, out.PoolTimeoutMS = p.rdb.Options().PoolSize, ms(p.rdb.Options().PoolTimeout)

	p.reg = registry.New(bsmredislock.New(), goredsync.New())
	if err := p.reg.Watch(p.rdb); err != nil {
		return out, err
	}
	defer p.stopWD()

	lc := redislock.New(p.rdb)
	prefix := "n" + pool[:1]
	locks, obtained, err := p.obtain(ctx, lc, prefix, n)
	out.ObtainNS = int64(obtained)
	if err != nil {
		return out, err
	}

	// The application: GET and SET, and Release and Obtain again.
	st := startStreams(ctx, p.rdb, &releaser{lc: lc, locks: locks, busy: make([]atomic.Bool, n)}, prefix)
	blocks, err := p.runBlocks()
	appOps, relOps, relErr := st.end()
	p.stopWD()
	if err != nil {
		return out, err
	}
	if relErr != nil {
		return out, relErr
	}
	out.Blocks, out.Sweeps, out.Renewals, out.Lost, out.Losses, out.Trouble = blocks, p.sweeps.snapshot(), p.renewals, p.lost.Load(), p.losses, p.trouble
	out.summarize(appOps, relOps)
	return out, nil
}

// neighbourOptions are the watched client's options with pool's pool.
func neighbourOptions(addr, pool string) (*redis.Options, error) {
	opts := &redis.Options{Addr: addr}
	switch pool {
	case "default":
	case "small":
		opts.PoolSize, opts.PoolTimeout = smallPoolSize, smallPoolTimeout
	default:
		return nil, fmt.Errorf("unknown pool %q", pool)
	}
	return opts, nil
}

// nbProcess is the watched client of one pool configuration's process
// and its watchdog, attached and stopped between blocks.
type nbProcess struct {
	rdb *redis.Client
	reg *registry.Registry

	lost     atomic.Int64
	renewals int64           // of the watchdogs stopped so far
	losses   watchdog.Losses // of the watchdogs stopped so far, by cause
	trouble  nbTrouble       // of the watchdogs stopped so far
	sweeps   sweepLog
	wd       *watchdog.Watchdog // nil while stopped
}

// attach attaches a watchdog on -neighbour-schedule.
func (p *nbProcess) attach() error {
	var err error
	p.wd, err = watchdog.Attach(p.reg, watchdog.WithSchedule(neighbour.schedule),
		watchdog.WithOnLost(func(registry.Lock, error) { p.lost.Add(1) }))
	if err != nil {
		return err
	}
	p.wd.AddObserver(&p.sweeps)
	return nil
}

// stopWD stops the watchdog, if attached, and counts its renewals.
func (p *nbProcess) stopWD() {
	if p.wd != nil {
		p.wd.Stop()
		st := p.wd.Stats()
		p.renewals += st.Renewals
		p.losses.Gone += st.Losses.Gone
		p.losses.Taken += st.Losses.Taken
		p.losses.Unreachable += st.Losses.Unreachable
		p.losses.MaxHold += st.Losses.MaxHold
		p.trouble.Failures += st.Failures
		p.trouble.Hedges += st.Hedges
		p.trouble.RenewErrors += st.RenewErrors
		p.trouble.Missed += st.DeadlinesMissed
		p.trouble.Unconfirmed += st.Unconfirmed
		p.trouble.SpareCalls += st.SpareCalls
		for _, ep := range st.Endpoints {
			if ep.LastError != nil {
				p.trouble.LastError = ep.LastError.Error()
			}
		}
		p.wd = nil
	}
}

// obtain obtains the locks with the watchdog attached, as an application
// does, renews them all once, then stops it: the blocks start fresh. It
// returns the locks and how long obtaining them took (when they were all
// obtained).
func (p *nbProcess) obtain(ctx context.Context, lc *redislock.Client, prefix string, n int) ([]*redislock.Lock, time.Duration, error) {
	if err := p.attach(); err != nil {
		return nil, 0, err
	}
	locks := make([]*redislock.Lock, n)
	start := time.Now()
	err := forEach(n, func(i int) error {
		l, err := lc.Obtain(ctx, lockKey(prefix, i), neighbourTTL, lockOptions())
		if err != nil {
			return fmt.Errorf("obtain %s: %w", lockKey(prefix, i), err)
		}
		locks[i] = l
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	took := time.Since(start)
	if err := p.wd.Sweep(ctx); err != nil {
		return nil, took, fmt.Errorf("sweep after obtaining: %w", err)
	}
	p.stopWD()
	p.renewals = 0
	p.sweeps.reset()
	return locks, took, nil
}

// runBlocks runs the blocks, attaching and stopping the watchdog between
// them. On an error it returns the blocks run so far.
func (p *nbProcess) runBlocks() ([]nbBlock, error) {
	mode := modeWithout
	var blocks []nbBlock
	for _, m := range blockModes(neighbourBlocks()) {
		if m != mode {
			if m == modeWith {
				if err := p.attach(); err != nil {
					return blocks, err
				}
			} else {
				p.stopWD()
			}
			mode = m
			time.Sleep(neighbourSettle)
		}
		pt := p.rdb.PoolStats().Timeouts
		b := nbBlock{Mode: m, StartNS: time.Now().UnixNano()}
		time.Sleep(neighbour.block)
		b.EndNS = time.Now().UnixNano()
		b.PoolTimeouts = int64(p.rdb.PoolStats().Timeouts - pt)
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// nbStreams are the application's streams on the watched client: GET and
// SET, and Release and Obtain again, each timed by timeLoop until end.
type nbStreams struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	app      [][]opSample
	released [][]opSample
	rel      *releaser
}

// startStreams starts neighbourApps streams of GET and SET on keys of
// their own and neighbourReleasers streams of rel's releases.
func startStreams(ctx context.Context, rdb *redis.Client, rel *releaser, prefix string) *nbStreams {
	st := &nbStreams{
		stop:     make(chan struct{}),
		app:      make([][]opSample, neighbourApps),
		released: make([][]opSample, neighbourReleasers),
		rel:      rel,
	}
	for g := range neighbourApps {
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			key, val := fmt.Sprintf("bench:%s:app:%d", prefix, g), strings.Repeat("v", 64)
			st.app[g] = timeLoop(ctx, st.stop, neighbour.interval, func(ctx context.Context, k int) error {
				if k%2 == 0 {
					return rdb.Set(ctx, key, val, 0).Err()
				}
				return rdb.Get(ctx, key).Err()
			})
		}()
	}
	for g := range neighbourReleasers {
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			st.released[g] = timeLoop(ctx, st.stop, neighbour.interval, func(ctx context.Context, _ int) error { return rel.release(ctx) })
		}()
	}
	return st
}

// end stops the streams, waits for them and for the obtains again in
// flight, and returns the app's and the releases' samples and the
// releaser's first error.
func (st *nbStreams) end() (appOps, relOps []opSample, relErr error) {
	close(st.stop)
	st.wg.Wait()
	relErr = st.rel.wait()
	for _, a := range st.app {
		appOps = append(appOps, a...)
	}
	for _, r := range st.released {
		relOps = append(relOps, r...)
	}
	return appOps, relOps, relErr
}

// summarize fills out's modes and its blocks' app p99 from the app's and
// the releases' samples, over out.Blocks and out.Sweeps.
func (out *neighbourChild) summarize(appOps, relOps []opSample) {
	blocks := out.Blocks
	for i, v := range blockP99(appOps, blocks) {
		out.Blocks[i].AppP99MS = v
	}
	with, without, inSweep := byMode(appOps, blocks, out.Sweeps)
	appIn := summarizeOps(inSweep)
	out.With.App, out.Without.App, out.With.AppDuringSweeps = summarizeOps(with), summarizeOps(without), &appIn
	with, without, inSweep = byMode(relOps, blocks, out.Sweeps)
	relIn := summarizeOps(inSweep)
	out.With.Release, out.Without.Release, out.With.ReleaseDuringSweeps = summarizeOps(with), summarizeOps(without), &relIn
	for _, b := range blocks {
		m := &out.Without
		if b.Mode == modeWith {
			m = &out.With
		}
		m.Blocks++
		m.Seconds += time.Duration(b.EndNS - b.StartNS).Seconds()
		m.PoolTimeouts += b.PoolTimeouts
		for _, w := range out.Sweeps {
			if w[1] >= b.StartNS && w[1] < b.EndNS {
				m.Sweeps++
			}
		}
	}
}

// nbTrouble sums what the watchdogs' Stats say went wrong: renewal
// pipelines that failed, calls hedged, script calls that failed,
// deadlines missed, holders told, calls on the watchdog's own connections,
// and the last renewal error an endpoint gave.
type nbTrouble struct {
	Failures    int64  `json:"failures"`
	Hedges      int64  `json:"hedges"`
	RenewErrors int64  `json:"renew_errors"`
	Missed      int64  `json:"deadlines_missed"`
	Unconfirmed int64  `json:"unconfirmed"`
	SpareCalls  int64  `json:"spare_calls"`
	LastError   string `json:"last_error,omitempty"`
}
