package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The storm case (-cases storm, issue 26) measures short locks at scale:
// a process obtains -storm-locks locks of -storm-ttl (redislock or redsync,
// -storm-lib) in a burst by stormWorkers goroutines on one client, then,
// every -storm-wave, releases a third of them and obtains them again (new
// values), the same goroutines, until -storm-duration has passed since the
// burst began; then it releases every lock it holds. On that same client
// the application runs stormClosed goroutines of GET/SET back to back
// (closed loop, each command timed alone) and one stream with a command
// due every millisecond (open loop, timed from when it was due, see
// timeLoop). An unwatched client of its own polls every held lock's key
// (-storm-poll) for its value.
//
// Each pool configuration (go-redis's default pool, and PoolSize 4) runs
// in rounds (-storm-rounds), each round twice, each time in a child
// process of its own: with lockwatch (the client watched, a watchdog
// attached on the default schedule) and without (the client unwatched, no
// watchdog: the locks expire after their TTL, which only the loss figures
// show; the application's latency is what is compared). The order is
// with, without and without, with in turn (by pool and round), so that a
// drift of the machine's load weighs on both modes alike. A pool's p99
// rise is the median of its rounds' rises: on this 2-core machine, which
// the storm keeps busy on its own, two runs of one build a minute apart
// differ by several milliseconds at p99 (2026-11-30: the open loop's rise
// ranged from +0.5 to +8.4 ms over 14 rounds of one build), more than the
// budget; every round is printed.
//
// A lock is lost when the watchdog reported it (OnLost), when its release
// found it not held (redislock.ErrLockNotHeld; redsync's
// ErrLockAlreadyExpired or a node taken), or when the poller found its key
// gone or holding another value while it was held; each lock counts once,
// whoever found it.
const (
	// stormWorkers is the number of goroutines that obtain and release.
	stormWorkers = 32
	// stormClosed is the number of closed-loop GET/SET goroutines.
	stormClosed = 8
	// stormOpenEvery is when the open-loop stream's commands fall due.
	stormOpenEvery = time.Millisecond
	// stormCmdTimeout bounds an obtain's or a release's single try.
	stormCmdTimeout = 5 * time.Second
	// stormTries is how many times an obtain or a release that failed
	// (an error, not a lock found lost) is tried.
	stormTries = 10
	// stormPollChunk is the number of keys of one poll pipeline: small,
	// so that the poller holds Redis no longer than the application's
	// own commands do.
	stormPollChunk = 100
	// stormStatsEvery is how often the watchdog's Stats are sampled.
	stormStatsEvery = 250 * time.Millisecond
)

// stormFlags are the storm case's flags.
type stormFlags struct {
	locks    int
	ttl      time.Duration
	lib      string
	duration time.Duration
	wave     time.Duration
	poll     time.Duration
	profile  string
	rounds   int
}

// defaultStorm are the flags' defaults (issue 26's storm), and storm their
// values.
var (
	defaultStorm = stormFlags{20_000, 1500 * time.Millisecond, "redislock", 20 * time.Second, 3 * time.Second, 500 * time.Millisecond, "", 3}
	storm        = defaultStorm
)

// stormLibs are the libraries -storm-lib accepts.
var stormLibs = []string{"redislock", "redsync"}

// stormResult is the -json "storm" object.
type stormResult struct {
	Locks        int     `json:"locks"`
	TTLS         float64 `json:"ttl_s"`
	Lib          string  `json:"lib"`
	ValueBytes   int     `json:"value_bytes"`
	DurationS    float64 `json:"duration_s"`
	WaveS        float64 `json:"wave_s"`
	PollS        float64 `json:"poll_s"`
	Workers      int     `json:"workers"`
	Rounds       int     `json:"rounds"`
	ClosedLoop   int     `json:"closed_loop_goroutines"`
	OpenEveryMS  float64 `json:"open_loop_every_ms"`
	TimeoutMS    float64 `json:"command_timeout_ms"`
	BudgetMS     float64 `json:"budget_ms"`
	NeededPerSec float64 `json:"renewals_needed_per_sec"`
	// Pools has one entry per pool configuration.
	Pools []stormPool `json:"pools"`
}

// stormPool is one pool configuration's rounds.
type stormPool struct {
	Pool   string       `json:"pool"`
	Rounds []stormRound `json:"rounds"`
	// The medians of the rounds' p99 rises, ms.
	ClosedP99RiseMS  float64 `json:"closed_p99_rise_ms"`
	OpenP99RiseMS    float64 `json:"open_p99_rise_ms"`
	ObtainP99RiseMS  float64 `json:"obtain_p99_rise_ms"`
	ReleaseP99RiseMS float64 `json:"release_p99_rise_ms"`
	// Lost and Held add up the runs with lockwatch.
	Lost int64 `json:"lost_with_lockwatch"`
	Held int64 `json:"held_with_lockwatch"`
}

// stormRound is one round of a pool configuration: its two runs.
type stormRound struct {
	With    stormRun `json:"with"`
	Without stormRun `json:"without"`
	// The p99 rises, with minus without, ms.
	ClosedP99RiseMS float64 `json:"closed_p99_rise_ms"`
	OpenP99RiseMS   float64 `json:"open_p99_rise_ms"`
	// The waves' obtains' and releases' p99 rises, ms.
	ObtainP99RiseMS  float64 `json:"obtain_p99_rise_ms"`
	ReleaseP99RiseMS float64 `json:"release_p99_rise_ms"`
}

// stormRun is one run: one pool configuration, one mode.
type stormRun struct {
	Pool          string  `json:"pool"`
	Mode          string  `json:"mode"`
	PoolSize      int     `json:"pool_size"`
	PoolTimeoutMS float64 `json:"pool_timeout_ms"`
	// Held counts the locks obtained, the burst's and the waves'.
	Held int64 `json:"held"`
	// ObtainFailed counts the obtains that failed stormTries times.
	ObtainFailed int64 `json:"obtain_failed"`
	// ReleaseErrors counts the releases that failed stormTries times
	// (not those that found their lock lost).
	ReleaseErrors int64 `json:"release_errors"`
	// Lost counts the locks lost, each once; the others who found them.
	Lost  int64     `json:"lost"`
	Found stormLost `json:"found"`
	// Watchdog is lockwatch's view (with lockwatch only).
	Watchdog *stormWatchdog `json:"watchdog,omitempty"`
	// StopHung is set when the watchdog's Stop had not returned
	// stormStopWait after the last lock was released.
	StopHung bool `json:"stop_hung,omitempty"`
	// Closed and Open are the application's closed- and open-loop
	// commands, from the burst's start to the run's end.
	Closed latency `json:"closed_loop"`
	Open   latency `json:"open_loop"`
	// Obtain and Release are the waves' lock commands, each try timed
	// alone: the application's commands too.
	Obtain       latency `json:"wave_obtain"`
	Release      latency `json:"wave_release"`
	PoolTimeouts int64   `json:"pool_timeouts"`
	// BurstS is how long obtaining the first locks took; WavesS each
	// wave's release and obtain again.
	BurstS float64   `json:"burst_s"`
	WavesS []float64 `json:"waves_s"`
	// Polls counts the poller's passes over every held lock.
	Polls int `json:"polls"`
	// ClientCPUS and ServerCPUS are this process's and Redis's CPU time
	// from the burst's start to the run's end.
	ClientCPUS float64 `json:"client_cpu_s"`
	ServerCPUS float64 `json:"server_cpu_s"`
	// LoadAvg is the 1-minute load average before and after the run.
	LoadAvg [2]float64 `json:"load_avg_1m"`
	Error   string     `json:"error,omitempty"`
}

// stormLost counts lost locks by who found them (a lock may be found by
// several).
type stormLost struct {
	// OnLost: reported by the watchdog (OnLost), before or after its
	// release.
	OnLost int64 `json:"on_lost"`
	// Release: the release found the lock not held.
	Release int64 `json:"release"`
	// PollGone and PollOther: the poller found the key gone, or holding
	// another value, while the lock was held.
	PollGone  int64 `json:"poll_gone"`
	PollOther int64 `json:"poll_other"`
	// OnLostHeld counts the locks OnLost reported whose release found
	// them held, before or after the report: false reports (I3, I12),
	// counted in Lost all the same (the job was told). OnLostUnknown
	// counts reports of values the bench did not obtain.
	OnLostHeld    int64 `json:"on_lost_held"`
	OnLostUnknown int64 `json:"on_lost_unknown"`
}

// stormWatchdog is the watchdog's Stats at the end of a run, and what an
// observer saw.
type stormWatchdog struct {
	Renewals       int64   `json:"renewals"`
	RenewalsPerSec float64 `json:"renewals_per_sec"`
	Failures       int64   `json:"failures"`
	RenewErrors    int64   `json:"renew_errors"`
	Lost           int64   `json:"lost"`
	Gone           int64   `json:"lost_gone"`
	Taken          int64   `json:"lost_taken"`
	Unreachable    int64   `json:"lost_unreachable"`
	MaxHold        int64   `json:"lost_max_hold"`
	FastLaneMax    int     `json:"fast_lane_max"`
	// Pipelines counts renewal pipelines (Observer.Renewed); Late those
	// sent when their most urgent lock had a third of its TTL left or
	// less (I2's floor), LeastHeadroom the least fraction seen.
	Pipelines     int64   `json:"pipelines"`
	Late          int64   `json:"late_pipelines"`
	LeastHeadroom float64 `json:"least_headroom"`
	// DeadlinesMissed (renewals sent after their deadline: the endpoint
	// is behind), Hedges, Unconfirmed (holders told a lock may be lost)
	// and SpareCalls (calls on the watchdog's own connections) are
	// Stats'; LastError is the last renewal error an endpoint gave.
	DeadlinesMissed int64  `json:"deadlines_missed"`
	Hedges          int64  `json:"hedges"`
	Unconfirmed     int64  `json:"unconfirmed"`
	SpareCalls      int64  `json:"spare_calls"`
	LastError       string `json:"last_error,omitempty"`
}

// medianRise is the median over p's rounds of the rise rise picks.
func (p *stormPool) medianRise(rise func(stormRound) float64) float64 {
	xs := make([]float64, len(p.Rounds))
	for k, rd := range p.Rounds {
		xs[k] = rise(rd)
	}
	return median(xs)
}

// stormOrder is the order of a round's runs: with, without for the first
// pool's first round, and in turn after that (i counts the pool's and the
// round's number).
func stormOrder(i int) []string {
	if i%2 == 0 {
		return []string{modeWith, modeWithout}
	}
	return []string{modeWithout, modeWith}
}

// measureStorm runs the storm case: each pool configuration with and
// without lockwatch, each run in a child process, the server flushed
// between them.
func measureStorm(ctx context.Context, addr string, obs *redis.Client, stderr io.Writer) (*stormResult, error) {
	r := &stormResult{
		Locks: storm.locks, TTLS: storm.ttl.Seconds(), Lib: storm.lib, ValueBytes: valueBytes,
		DurationS: storm.duration.Seconds(), WaveS: storm.wave.Seconds(), PollS: storm.poll.Seconds(),
		Workers: stormWorkers, Rounds: storm.rounds, ClosedLoop: stormClosed, OpenEveryMS: ms(stormOpenEvery),
		TimeoutMS: ms(neighbourTimeout), BudgetMS: ms(neighbourBudget),
		NeededPerSec: float64(storm.locks) / (storm.ttl / 3).Seconds(),
	}
	pools := make([]stormPool, len(neighbourPools))
	for k := range storm.rounds {
		for i, pool := range neighbourPools {
			p := &pools[i]
			p.Pool = pool
			var rd stormRound
			for _, mode := range stormOrder(i + k) {
				if err := obs.FlushAll(ctx).Err(); err != nil {
					return nil, fmt.Errorf("FLUSHALL: %w", err)
				}
				fmt.Fprintf(stderr, "storm, round %d of %d, %s pool, %s lockwatch: %d %s locks of %v, a third again every %v, for %v ...\n",
					k+1, storm.rounds, pool, mode, storm.locks, storm.lib, storm.ttl, storm.wave, storm.duration)
				run, err := spawnStorm(ctx, addr, mode, pool)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s pool, %s lockwatch: %w", k+1, pool, mode, err)
				}
				fmt.Fprintf(stderr, "storm, round %d of %d, %s pool, %s lockwatch: %d held, %d lost; p99 closed %.2f ms, open %.2f ms\n",
					k+1, storm.rounds, pool, mode, run.Held, run.Lost, run.Closed.P99MS, run.Open.P99MS)
				if mode == modeWith {
					rd.With = run
				} else {
					rd.Without = run
				}
			}
			rd.ClosedP99RiseMS = rd.With.Closed.P99MS - rd.Without.Closed.P99MS
			rd.OpenP99RiseMS = rd.With.Open.P99MS - rd.Without.Open.P99MS
			rd.ObtainP99RiseMS = rd.With.Obtain.P99MS - rd.Without.Obtain.P99MS
			rd.ReleaseP99RiseMS = rd.With.Release.P99MS - rd.Without.Release.P99MS
			p.Rounds = append(p.Rounds, rd)
			p.Lost += rd.With.Lost
			p.Held += rd.With.Held
		}
	}
	for i := range pools {
		p := &pools[i]
		p.ClosedP99RiseMS = p.medianRise(func(rd stormRound) float64 { return rd.ClosedP99RiseMS })
		p.OpenP99RiseMS = p.medianRise(func(rd stormRound) float64 { return rd.OpenP99RiseMS })
		p.ObtainP99RiseMS = p.medianRise(func(rd stormRound) float64 { return rd.ObtainP99RiseMS })
		p.ReleaseP99RiseMS = p.medianRise(func(rd stormRound) float64 { return rd.ReleaseP99RiseMS })
	}
	r.Pools = pools
	return r, nil
}

// spawnStorm runs one run in a child process.
func spawnStorm(ctx context.Context, addr, mode, pool string) (stormRun, error) {
	var run stormRun
	err := spawnJSON(ctx, []string{"-child", "storm-" + mode + "-" + pool, "-n", strconv.Itoa(storm.locks), "-redis", addr,
		"-storm-ttl", storm.ttl.String(), "-storm-lib", storm.lib, "-storm-duration", storm.duration.String(),
		"-storm-wave", storm.wave.String(), "-storm-poll", storm.poll.String(), "-storm-profile", storm.profile,
		"-value-bytes", strconv.Itoa(valueBytes)}, &run)
	if err != nil {
		return run, err
	}
	if run.Error != "" {
		return run, errors.New(run.Error)
	}
	return run, nil
}

// checkStormFlags checks the -storm-* flags and -value-bytes.
func checkStormFlags() error {
	switch {
	case storm.locks < 3:
		return fmt.Errorf("-storm-locks %d: need at least 3 (a wave is a third)", storm.locks)
	case storm.ttl < 50*time.Millisecond:
		return fmt.Errorf("-storm-ttl %v: need at least 50ms", storm.ttl)
	case storm.lib != stormLibs[0] && storm.lib != stormLibs[1]:
		return fmt.Errorf("-storm-lib %q: need %s or %s", storm.lib, stormLibs[0], stormLibs[1])
	case storm.wave <= 0:
		return fmt.Errorf("-storm-wave %v: need a positive period", storm.wave)
	case storm.rounds < 1 || storm.rounds > 20:
		return fmt.Errorf("-storm-rounds %d: need 1 to 20", storm.rounds)
	case storm.duration < time.Second:
		return fmt.Errorf("-storm-duration %v: need at least 1s", storm.duration)
	case storm.poll < 0:
		return fmt.Errorf("-storm-poll %v: need 0 (no poller) or more", storm.poll)
	case valueBytes != 0 && (valueBytes < minValueBytes || valueBytes > maxValueBytes):
		return fmt.Errorf("-value-bytes %d: need 0 (the library's own) or %d to %d", valueBytes, minValueBytes, maxValueBytes)
	}
	return nil
}
