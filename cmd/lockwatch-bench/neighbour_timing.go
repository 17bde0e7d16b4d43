package main

import (
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// opSample is one timed command.
type opSample struct {
	at  int64 // start, Unix ns
	d   time.Duration
	err uint8 // errNone, errTimeout, errOther
}

const (
	errNone uint8 = iota
	errTimeout
	errOther
)

func errClass(err error) uint8 {
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return errNone
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errTimeout
	}
	return errOther
}

// summarizeOps summarises samples (nearest-rank percentiles).
func summarizeOps(ops []opSample) latency {
	l := latency{Count: len(ops)}
	if len(ops) == 0 {
		return l
	}
	ds := make([]time.Duration, len(ops))
	for i, o := range ops {
		ds[i] = o.d
		switch o.err {
		case errTimeout:
			l.Errors++
			l.Timeouts++
		case errOther:
			l.Errors++
		}
	}
	slices.Sort(ds)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	l.P50MS, l.P99MS, l.MaxMS = ms(rank(0.50)), ms(rank(0.99)), ms(ds[len(ds)-1])
	return l
}

// blockP99 is the p99 of the ops that began in each block, ms.
func blockP99(ops []opSample, blocks []nbBlock) []float64 {
	per := make([][]opSample, len(blocks))
	for _, o := range ops {
		i := sort.Search(len(blocks), func(i int) bool { return blocks[i].EndNS > o.at })
		if i < len(blocks) && o.at >= blocks[i].StartNS {
			per[i] = append(per[i], o)
		}
	}
	out := make([]float64, len(blocks))
	for i, p := range per {
		out[i] = summarizeOps(p).P99MS
	}
	return out
}

// window is a span of time, [0] to [1] in Unix ns.
type window [2]int64

// byMode splits ops by the mode of the block each began in; ops that
// began outside every block are left out. inSweep gets those with
// lockwatch that began during one of sweeps.
func byMode(ops []opSample, blocks []nbBlock, sweeps []window) (with, without, inSweep []opSample) {
	for _, o := range ops {
		i := sort.Search(len(blocks), func(i int) bool { return blocks[i].EndNS > o.at })
		if i == len(blocks) || o.at < blocks[i].StartNS {
			continue
		}
		if blocks[i].Mode == modeWithout {
			without = append(without, o)
			continue
		}
		with = append(with, o)
		j := sort.Search(len(sweeps), func(j int) bool { return sweeps[j][1] > o.at })
		if j < len(sweeps) && o.at >= sweeps[j][0] {
			inSweep = append(inSweep, o)
		}
	}
	return with, without, inSweep
}

// pacer makes commands due every interval, whether or not the previous
// one has answered, as an application's requests arrive.
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(every time.Duration) *pacer { return &pacer{every: every, next: time.Now()} }

// wait waits until the next command is due and returns when it counts
// from: now, when the caller was early and slept until it was due (a late
// wake-up is not counted); when it was due, when the caller is behind.
// With no interval it returns now.
func (p *pacer) wait() time.Time {
	now := time.Now()
	if p.every <= 0 {
		return now
	}
	due := p.next
	p.next = due.Add(p.every)
	if now.Before(due) {
		time.Sleep(due.Sub(now))
		return time.Now()
	}
	return due
}

// timeLoop calls f until stop is closed and returns each call's timing.
// With an interval, a call is due every interval and made on a goroutine
// of its own, timed from when it was due, with a deadline neighbourTimeout
// after that: a slow call holds up no other, and the calls are spread
// evenly over time whatever Redis does (a loop that waits for each answer
// before it sends the next sends fewer commands while Redis is slow, and
// so hides it). With none, calls are made back to back, each timed alone.
// k numbers the calls.
func timeLoop(ctx context.Context, stop <-chan struct{}, interval time.Duration, f func(ctx context.Context, k int) error) []opSample {
	var (
		mu  sync.Mutex
		out []opSample // guarded by mu
		wg  sync.WaitGroup
	)
	call := func(t0 time.Time, k int) {
		cctx, cancel := context.WithDeadline(ctx, t0.Add(neighbourTimeout))
		err := f(cctx, k)
		d := time.Since(t0)
		cancel()
		if err == errSkip {
			return
		}
		mu.Lock()
		out = append(out, opSample{at: t0.UnixNano(), d: d, err: errClass(err)})
		mu.Unlock()
	}
	p := newPacer(interval)
	for k := 0; ; k++ {
		t0 := p.wait()
		select {
		case <-stop:
			wg.Wait()
			return out
		default:
		}
		if interval <= 0 {
			call(t0, k)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(t0, k)
		}()
	}
}

// errSkip is a call timeLoop does not record.
var errSkip = errors.New("skipped")
