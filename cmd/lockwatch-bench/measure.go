package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// result is one case's line of the report. The first seven fields are the
// documented -json schema; the rest are extras.
type result struct {
	Impl           string  `json:"impl"`
	Locks          int     `json:"locks"`
	SweepMS        float64 `json:"sweep_ms"`
	RenewalsPerSec float64 `json:"renewals_per_sec"`
	ClientCPUMS    float64 `json:"client_cpu_ms"`
	ServerCPUMS    float64 `json:"server_cpu_ms"`
	BytesPerLock   float64 `json:"bytes_per_lock"`

	// KeyValueBytes is the average len(key)+len(value) of the case's locks,
	// which BytesPerLock includes where the case keeps its own copy.
	KeyValueBytes float64   `json:"key_value_bytes"`
	PeakRSSMB     float64   `json:"peak_rss_mb"`
	SweepsMS      []float64 `json:"sweeps_ms"`
	// Speedup is this case's sweep time over lockwatch's at the same N.
	Speedup float64 `json:"lockwatch_speedup,omitempty"`
	// FailedRenewals is the median number of renewals of a sweep that
	// failed (only per-lock with -per-lock-pool-timeout can fail).
	FailedRenewals float64 `json:"failed_renewals,omitempty"`
	// WallOverServerCPU is the median, over the case's sweeps, of each
	// sweep's wall time over the Redis CPU time measured across that same
	// sweep (INFO cpu before and after): 1 would mean the sweep kept Redis
	// busy all along. Sweeps in which Redis's CPU counter did not move are
	// left out; 0 when none moved.
	WallOverServerCPU float64 `json:"wall_over_server_cpu"`
	Note              string  `json:"note,omitempty"`
	// NodeLocks is, in the cluster case, the number of keys on each master.
	NodeLocks map[string]int64 `json:"node_locks,omitempty"`
}

// sample is one measured sweep.
type sample struct {
	wall, clientCPU, serverCPU time.Duration
	failed                     int64        // renewals that failed (per-lock with a short pool timeout)
	nodes                      []nodeSample // per cluster master (the cluster case)
}

// nodeSample is one cluster master's share of a sweep.
type nodeSample struct {
	Addr string `json:"addr"`
	// CPUNS is the node's CPU time across the sweep (INFO cpu).
	CPUNS int64 `json:"cpu_ns"`
	// LaneNS is how long the watchdog's lane of that node took to sweep it
	// (its EndpointStats.LastSweep).
	LaneNS int64 `json:"lane_sweep_ns"`
}

// sampleJSON is a sample on the wire between a case's process and the
// parent.
type sampleJSON struct {
	WallNS      int64        `json:"wall_ns"`
	ClientCPUNS int64        `json:"client_cpu_ns"`
	ServerCPUNS int64        `json:"server_cpu_ns"`
	Failed      int64        `json:"failed,omitempty"`
	Nodes       []nodeSample `json:"nodes,omitempty"`
	Error       string       `json:"error,omitempty"`
}

// meter measures a span of wall time, this process's CPU time and the
// server's CPU time.
type meter struct {
	obs  *redis.Client
	wall time.Time
	cpu  time.Duration
	srv  float64
}

func startMeter(ctx context.Context, obs *redis.Client) (meter, error) {
	si, err := readInfo(ctx, obs)
	if err != nil {
		return meter{}, err
	}
	return meter{obs: obs, srv: si.cpu, cpu: processCPU(), wall: time.Now()}, nil
}

// stop ends the span; end is when the measured work finished (the wall
// span ends there even if stop is called later).
func (m meter) stop(ctx context.Context, end time.Time) (sample, error) {
	cpu := processCPU()
	si, err := readInfo(ctx, m.obs)
	if err != nil {
		return sample{}, err
	}
	return sample{
		wall:      end.Sub(m.wall),
		clientCPU: cpu - m.cpu,
		serverCPU: time.Duration((si.cpu - m.srv) * float64(time.Second)),
	}, nil
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSMB is this process's peak resident set size: VmHWM of
// /proc/self/status where there is one. getrusage's maxrss is the fallback
// only: Linux keeps it across execve, and Go starts children with
// CLONE_VM, so a child's maxrss is at least its parent's peak.
func peakRSSMB() float64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					return kb / 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux reports kilobytes
}

// liveBytes is the heap in use plus goroutine stacks, after a full GC.
func liveBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

// summarize turns samples into a result: medians of wall and CPU times.
func summarize(impl string, n int, samples []sample) result {
	med := func(f func(sample) time.Duration) time.Duration {
		v := make([]time.Duration, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	wall := med(func(s sample) time.Duration { return s.wall })
	r := result{
		Impl:        impl,
		Locks:       n,
		SweepMS:     ms(wall),
		ClientCPUMS: ms(med(func(s sample) time.Duration { return s.clientCPU })),
		ServerCPUMS: ms(med(func(s sample) time.Duration { return s.serverCPU })),
	}
	if wall > 0 {
		r.RenewalsPerSec = float64(n) / wall.Seconds()
	}
	failed := make([]float64, len(samples))
	for i, s := range samples {
		r.SweepsMS = append(r.SweepsMS, ms(s.wall))
		failed[i] = float64(s.failed)
	}
	r.FailedRenewals = median(failed)
	r.WallOverServerCPU = wallOverCPU(samples, func(s sample) time.Duration { return s.serverCPU })
	return r
}

// wallOverCPU is the median over samples of each one's wall time over the
// CPU time cpu picks from it, leaving out samples whose CPU time is 0.
func wallOverCPU(samples []sample, cpu func(sample) time.Duration) float64 {
	var ratios []float64
	for _, s := range samples {
		if c := cpu(s); c > 0 {
			ratios = append(ratios, float64(s.wall)/float64(c))
		}
	}
	return median(ratios)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// lockKey names the i-th lock of a case. It is built on demand, so that
// whatever keeps a key is what the memory figure counts.
func lockKey(prefix string, i int) string { return fmt.Sprintf("bench:%s:%07d", prefix, i) }

// warm opens n connections of c, so that pool growth is not counted as
// memory per lock.
func warm(ctx context.Context, c *redis.Client, n int) error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- c.Ping(ctx).Err() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
