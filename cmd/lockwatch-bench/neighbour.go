package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// The neighbour case (-cases neighbour) measures what the application pays
// for the sweep (DESIGN I14, issue 21): a process holds -neighbour-locks
// redislock locks of neighbourTTL on one watched client, and on that same
// client neighbourApps streams GET and SET keys of their own while
// neighbourReleasers streams release held locks (and obtain them again).
// A stream's command is due every -neighbour-interval and sent on a
// goroutine of its own, timed from when it was due (see timeLoop): the
// commands sample the run evenly, sweeps included, as an application's
// requests arrive whether or not Redis is slow.
// The watchdog is attached (sweeping on -neighbour-schedule) in some blocks
// of the run and stopped in the others, alternating W U U W W U U W ..., so
// that both modes see the same locks, the same process and the machine's
// load as it drifts. Commands due while the watchdog is being attached or
// stopped, and for neighbourSettle after, count in neither mode.
// Meanwhile the parent process, which shares nothing with that client,
// PINGs the server the same way on connections of its own.
// The whole is run once with go-redis's default pool and once with a
// small one (PoolSize 4, PoolTimeout 1s), in which the sweep's pipelines
// and the application's commands wait for the same connections.
const (
	// neighbourTTL is the locks' TTL: long enough that they survive two
	// blocks without lockwatch, short enough that only the watchdog keeps
	// them alive over the run.
	neighbourTTL = 30 * time.Second
	// neighbourApps is the number of streams of GET and SET.
	neighbourApps = 8
	// neighbourReleasers is the number of streams releasing held locks
	// (each lock is then obtained again).
	neighbourReleasers = 2
	// neighbourTimeout is every timed command's context timeout.
	neighbourTimeout = 500 * time.Millisecond
	// neighbourSettle is how long after Attach or Stop returned commands
	// are not counted.
	neighbourSettle = 250 * time.Millisecond
	// neighbourBudget is issue 21's budget for the p99 rise.
	neighbourBudget = 3 * time.Millisecond
	// smallPoolSize and smallPoolTimeout are the small pool's options.
	smallPoolSize    = 4
	smallPoolTimeout = time.Second
)

// neighbourPools are the pool configurations, in the report's order.
var neighbourPools = []string{"default", "small"}

// neighbourFlags are the neighbour case's flags.
type neighbourFlags struct {
	locks    int
	schedule string
	duration time.Duration
	block    time.Duration
	interval time.Duration
}

// defaultNeighbour are the flags' defaults, and neighbour their values.
var (
	defaultNeighbour = neighbourFlags{100_000, "@every 2s", 20 * time.Second, 5 * time.Second, time.Millisecond}
	neighbour        = defaultNeighbour
)

// Modes of a block.
const (
	modeWith    = "with"
	modeWithout = "without"
)

// neighbourResult is the -json "neighbour" object.
type neighbourResult struct {
	Locks            int     `json:"locks"`
	TTLS             float64 `json:"ttl_s"`
	ValueBytes       int     `json:"value_bytes"`
	Schedule         string  `json:"schedule"`
	DurationS        float64 `json:"duration_s"`
	BlockS           float64 `json:"block_s"`
	Blocks           int     `json:"blocks"`
	AppStreams       int     `json:"app_streams"`
	Releasers        int     `json:"release_streams"`
	CommandTimeoutMS float64 `json:"command_timeout_ms"`
	IntervalMS       float64 `json:"interval_ms"`
	SettleMS         float64 `json:"settle_ms"`
	BudgetMS         float64 `json:"budget_ms"`
	// Pools has one entry per pool configuration.
	Pools []neighbourPool `json:"pools"`
}

// neighbourPool is one pool configuration's run.
type neighbourPool struct {
	// Pool is "default" (go-redis's defaults) or "small".
	Pool          string        `json:"pool"`
	PoolSize      int           `json:"pool_size"`
	PoolTimeoutMS float64       `json:"pool_timeout_ms"`
	With          neighbourMode `json:"with"`
	Without       neighbourMode `json:"without"`
	// The p99 rises: with minus without, ms.
	AppP99RiseMS     float64 `json:"app_p99_rise_ms"`
	PingP99RiseMS    float64 `json:"ping_p99_rise_ms"`
	ReleaseP99RiseMS float64 `json:"release_p99_rise_ms"`
	// SweepMS is the median of the sweeps' wall times (the observer's
	// Swept), SweepsMS each of them.
	SweepMS  float64   `json:"sweep_ms"`
	SweepsMS []float64 `json:"sweeps_ms"`
	// Renewals and Lost are the watchdog's, over every block.
	Renewals int64 `json:"renewals"`
	Lost     int64 `json:"lost"`
	// Losses counts Lost by cause (the watchdog's Stats().Losses).
	Losses watchdog.Losses `json:"losses"`
	// Trouble is what else the watchdog's Stats counted going wrong.
	Trouble nbTrouble `json:"trouble"`
	// ObtainS is how long obtaining the locks took.
	ObtainS float64 `json:"obtain_s"`
	// Blocks are the blocks, in order.
	Blocks []nbBlock `json:"blocks"`
	// LoadAvg is the machine's 1-minute load average (/proc/loadavg)
	// before and after the run: other work on the machine shows there.
	LoadAvg [2]float64 `json:"load_avg_1m"`
}

// neighbourMode is one mode's figures, over its blocks.
type neighbourMode struct {
	Blocks  int     `json:"blocks"`
	Seconds float64 `json:"seconds"`
	// Sweeps is the number of sweeps that ended in the blocks.
	Sweeps int `json:"sweeps"`
	// App is the GET and SET commands of the application's goroutines;
	// AppDuringSweeps those of them that began while a sweep ran (with
	// lockwatch only).
	App             latency  `json:"app"`
	AppDuringSweeps *latency `json:"app_during_sweeps,omitempty"`
	// PoolTimeouts is the client's pool timeouts (PoolStats().Timeouts,
	// the watchdog's own waits included).
	PoolTimeouts int64 `json:"pool_timeouts"`
	// Ping is the unrelated client's PING, from the parent process.
	Ping latency `json:"ping"`
	// Release is the holder's own Release of a held lock (through the
	// watched client), ReleaseDuringSweeps those that began while a sweep
	// ran (with lockwatch only).
	Release             latency  `json:"release"`
	ReleaseDuringSweeps *latency `json:"release_during_sweeps,omitempty"`
}

// latency summarises timed commands.
type latency struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// Errors counts the commands that failed, Timeouts those of them that
	// failed because their context's deadline passed.
	Errors   int `json:"errors"`
	Timeouts int `json:"timeouts"`
}

// nbBlock is one block of the run: its mode and when its counted part
// began and ended (Unix ns).
type nbBlock struct {
	Mode         string `json:"mode"`
	StartNS      int64  `json:"start_ns"`
	EndNS        int64  `json:"end_ns"`
	PoolTimeouts int64  `json:"pool_timeouts"`
	// The block's own p99s, ms: a burst of other work on the machine
	// shows as one block out of line with the others of its mode.
	AppP99MS  float64 `json:"app_p99_ms"`
	PingP99MS float64 `json:"ping_p99_ms"`
}

// blockModes is the order of n blocks: W U U W W U U W ...
func blockModes(n int) []string {
	out := make([]string, n)
	for i := range out {
		if (i+1)/2%2 == 0 {
			out[i] = modeWith
		} else {
			out[i] = modeWithout
		}
	}
	return out
}

// neighbourBlocks is the number of blocks of the run: at least two.
func neighbourBlocks() int {
	return max(2, int((neighbour.duration+neighbour.block/2)/neighbour.block))
}

// measureNeighbour runs the neighbour case once per pool configuration,
// one after the other, each in a child process, PINGing the server from
// this one meanwhile.
func measureNeighbour(ctx context.Context, addr string, stderr io.Writer) (*neighbourResult, error) {
	r := &neighbourResult{
		Locks: neighbour.locks, TTLS: neighbourTTL.Seconds(), ValueBytes: valueBytes, Schedule: neighbour.schedule,
		DurationS: neighbour.duration.Seconds(), BlockS: neighbour.block.Seconds(), Blocks: neighbourBlocks(),
		AppStreams: neighbourApps, Releasers: neighbourReleasers, CommandTimeoutMS: ms(neighbourTimeout),
		IntervalMS: ms(neighbour.interval), SettleMS: ms(neighbourSettle), BudgetMS: ms(neighbourBudget),
	}
	for _, pool := range neighbourPools {
		fmt.Fprintf(stderr, "neighbour, %s pool: %d locks, %d blocks of %v on %q ...\n",
			pool, neighbour.locks, neighbourBlocks(), neighbour.block, neighbour.schedule)
		p, err := measureNeighbourPool(ctx, addr, pool)
		if err != nil {
			return nil, fmt.Errorf("%s pool: %w", pool, err)
		}
		fmt.Fprintf(stderr, "neighbour, %s pool: p99 with/without lockwatch: app %.2f/%.2f ms, PING %.2f/%.2f ms, Release %.2f/%.2f ms\n",
			pool, p.With.App.P99MS, p.Without.App.P99MS, p.With.Ping.P99MS, p.Without.Ping.P99MS, p.With.Release.P99MS, p.Without.Release.P99MS)
		r.Pools = append(r.Pools, p)
	}
	return r, nil
}

func measureNeighbourPool(ctx context.Context, addr, pool string) (neighbourPool, error) {
	// The unrelated client: connections of its own, in this process.
	pinger := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, MinIdleConns: 1})
	defer pinger.Close()
	// The previous pool configuration's locks go.
	if err := pinger.FlushAll(ctx).Err(); err != nil {
		return neighbourPool{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	load0 := loadAvg()
	stop := make(chan struct{})
	pings := make(chan []opSample, 1)
	go func() {
		pings <- timeLoop(ctx, stop, neighbour.interval, func(ctx context.Context, _ int) error { return pinger.Ping(ctx).Err() })
	}()

	var kid neighbourChild
	err := spawnJSON(ctx, []string{"-child", "neighbour-" + pool, "-n", strconv.Itoa(neighbour.locks), "-redis", addr,
		"-neighbour-schedule", neighbour.schedule, "-neighbour-duration", neighbour.duration.String(),
		"-neighbour-block", neighbour.block.String(), "-neighbour-interval", neighbour.interval.String(),
		"-value-bytes", strconv.Itoa(valueBytes)}, &kid)
	close(stop)
	ps := <-pings
	if err != nil {
		return neighbourPool{}, err
	}
	if kid.Error != "" {
		return neighbourPool{}, errors.New(kid.Error)
	}
	p := neighbourPool{
		Pool: kid.Pool, PoolSize: kid.PoolSize, PoolTimeoutMS: kid.PoolTimeoutMS,
		With: kid.With, Without: kid.Without, Renewals: kid.Renewals, Lost: kid.Lost, Losses: kid.Losses, Trouble: kid.Trouble,
		ObtainS: time.Duration(kid.ObtainNS).Seconds(), LoadAvg: [2]float64{load0, loadAvg()},
	}
	with, without, _ := byMode(ps, kid.Blocks, kid.Sweeps)
	p.With.Ping, p.Without.Ping = summarizeOps(with), summarizeOps(without)
	p.Blocks = kid.Blocks
	for i, v := range blockP99(ps, p.Blocks) {
		p.Blocks[i].PingP99MS = v
	}
	var sweeps []float64
	for _, w := range kid.Sweeps {
		sweeps = append(sweeps, ms(time.Duration(w[1]-w[0])))
	}
	p.SweepsMS, p.SweepMS = sweeps, median(slices.Clone(sweeps))
	p.AppP99RiseMS = p.With.App.P99MS - p.Without.App.P99MS
	p.PingP99RiseMS = p.With.Ping.P99MS - p.Without.Ping.P99MS
	p.ReleaseP99RiseMS = p.With.Release.P99MS - p.Without.Release.P99MS
	return p, nil
}

// loadAvg is the 1-minute load average, 0 where /proc/loadavg is not.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}
