package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/registry"
)

// hold is the job itself: it holds the locks for cfg.duration, samples
// their remaining TTL and prints a status line every cfg.every. It reports
// whether ctx ended first.
func (d *demo) hold(ctx context.Context, start time.Time) (interrupted bool) {
	deadline, nextPrint := start.Add(d.cfg.duration), start.Add(d.cfg.every)
	stealAt := start.Add(d.cfg.duration / 3)
	ticker := time.NewTicker(d.cfg.sample)
	defer ticker.Stop()
	pttl := make([]time.Duration, len(d.locks))
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(d.out, "job: interrupted")
			return true
		case <-d.jobCtx.Done():
			fmt.Fprintf(d.out, "job: stopped after %v: %v\n", time.Since(start).Round(time.Millisecond), context.Cause(d.jobCtx))
			return false
		case now := <-ticker.C:
			if d.cfg.steal && !d.stolen.Load() && !now.Before(stealAt) {
				d.stolen.Store(true)
				if err := call(ctx, func(ctx context.Context) error {
					return d.thief.Set(ctx, d.locks[0].key, "thief's own value", time.Minute).Err()
				}); err != nil {
					d.checks.add("steal", fmt.Errorf("%s: the thief's SET failed: %w", d.locks[0].key, err))
				}
				fmt.Fprintf(d.out, "thief: overwrote %s with its own value\n", d.locks[0].key)
			}
			for i, l := range d.locks {
				if i == 0 && d.stolen.Load() {
					continue // no longer the job's lock
				}
				err := call(ctx, func(ctx context.Context) (err error) {
					pttl[i], err = d.observer.PTTL(ctx, l.key).Result()
					return err
				})
				if err != nil {
					d.checks.add("pttl "+l.key, fmt.Errorf("%s: PTTL failed: %w", l.key, err))
					continue
				}
				d.judgeHeld(l.key, l.ttl, pttl[i], now)
			}
			if d.batch != nil {
				for _, k := range d.batch.keys {
					var ttl time.Duration
					err := call(ctx, func(ctx context.Context) (err error) {
						ttl, err = d.observer.PTTL(ctx, k).Result()
						return err
					})
					if err != nil {
						d.checks.add("pttl "+k, fmt.Errorf("%s: PTTL failed: %w", k, err))
						continue
					}
					d.judgeHeld(k, d.batch.ttl, ttl, now)
				}
			}
			done := !now.Before(deadline)
			if !now.Before(nextPrint) || done {
				d.printStatus(now.Sub(start), pttl)
				for !nextPrint.After(now) {
					nextPrint = nextPrint.Add(d.cfg.every)
				}
			}
			if done {
				return false
			}
		}
	}
}

// afterRelease checks that the registry dropped the released locks, that
// their keys stay gone, and that the contender can now take them.
func (d *demo) afterRelease(ctx context.Context) {
	for _, l := range d.reg.Locks() {
		d.checks.add("tracked "+l.Key, fmt.Errorf("%s: still tracked after its release", l.Key))
	}
	fmt.Fprintf(d.out, "job: released the locks; waiting %v before checking the keys stay gone\n", d.cfg.settle)
	time.Sleep(d.cfg.settle)
	keys := []string{d.locks[0].key, d.locks[1].key}
	if d.stolen.Load() {
		keys = keys[1:] // the thief's key stays
	}
	if d.batch != nil {
		keys = append(keys, d.batch.keys...)
	}
	for _, key := range keys {
		var n int64
		err := call(ctx, func(ctx context.Context) (err error) {
			n, err = d.observer.Exists(ctx, key).Result()
			return err
		})
		if err != nil {
			d.checks.add("exists "+key, fmt.Errorf("%s: EXISTS failed: %w", key, err))
			continue
		}
		d.checks.add("released "+key, checkReleased(key, n > 0))
	}
	if d.stolen.Load() {
		return // the thief holds the report lock: the contender cannot take it
	}
	if won := d.c.takeAll(ctx, d.checks); won == len(d.locks) {
		fmt.Fprintf(d.out, "contender: took %s and %s after the release\n", d.locks[0].key, d.locks[1].key)
	}
}

func (d *demo) printStatus(elapsed time.Duration, pttl []time.Duration) {
	renewals := renewalsOf(d.reg)
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs", elapsed.Seconds())
	for i, l := range d.locks {
		if i == 0 && d.stolen.Load() {
			fmt.Fprintf(&b, "  %s stolen                  |", l.name)
			continue
		}
		fmt.Fprintf(&b, "  %s ttl %5.2fs renewed %3d |", l.name, pttl[i].Seconds(), renewals[l.key])
	}
	fmt.Fprintf(&b, " fast lane %d | contender %d tries, %d won", d.wd.Stats().FastLane, d.c.attempts.Load(), d.c.wins.Load())
	fmt.Fprintln(d.out, b.String())
}

func printSummary(out io.Writer, locks []held, b *batch, res result) {
	fmt.Fprintln(out, "summary:")
	for _, l := range locks {
		fmt.Fprintf(out, "  %-10s %s, TTL %v: renewed %d times over %v\n", l.source, l.key, l.ttl, res.Renewals[l.key], res.Held)
	}
	if b != nil {
		fmt.Fprintf(out, "  %-10s %v (one lock), TTL %v: renewed %d times over %v\n", "redislock", b.keys, b.ttl, res.Renewals[b.keys[0]], res.Held)
	}
	fmt.Fprintf(out, "  watchdog:  %d renewals in %d sweeps, %d lost, %d failed script calls\n",
		res.Stats.Renewals, res.Stats.Sweeps, res.Stats.Lost, res.Stats.Failures)
	fmt.Fprintf(out, "  contender: %d attempts while held, %d won\n", res.Attempts, res.Wins)
	if res.Stopped != nil {
		fmt.Fprintf(out, "  job:       stopped by its context: %v\n", res.Stopped)
	}
	if res.NBroken == 0 {
		fmt.Fprintln(out, "  checks:    all held")
		return
	}
	fmt.Fprintf(out, "  checks:    %d broke:\n", res.NBroken)
	for _, b := range res.Broken {
		fmt.Fprintf(out, "    %s\n", b)
	}
}

// renewalsOf returns the renewal count of each tracked lock, by key.
func renewalsOf(reg *registry.Registry) map[string]int64 {
	m := make(map[string]int64)
	for _, l := range reg.Locks() {
		m[l.Key] = l.Renewals
	}
	return m
}

// checkHeld checks one PTTL sample of a lock the job holds: the key must
// exist, expire, and have at least a third of its TTL left (invariant I2).
// pttl is go-redis's PTTL result: -2ns for a missing key, -1ns for a key
// without an expiry.
func checkHeld(key string, ttl, pttl time.Duration) error {
	switch {
	case pttl == -2:
		return fmt.Errorf("%s: key gone while the job held it", key)
	case pttl < 0:
		return fmt.Errorf("%s: key has no expiry while the job held it", key)
	case pttl < ttl/3:
		return fmt.Errorf("%s: remaining TTL %v fell below a third of %v while held", key, pttl, ttl)
	}
	return nil
}

// judgeHeld checks a PTTL sample of key, taken at sampled, with
// checkHeld. A key gone or below a third of its TTL after this process or
// Redis stood still for a third of the TTL, in the TTL before the sample,
// is not counted broken: I2 holds while the holder runs and Redis answers.
// It is printed as a note, with the stall. A key without an expiry is
// never excused.
func (d *demo) judgeHeld(key string, ttl, pttl time.Duration, sampled time.Time) {
	err := checkHeld(key, ttl, pttl)
	if err == nil {
		return
	}
	if stalled := d.stalls.longest(sampled.Add(-ttl), time.Now()); pttl != -1 && stalled >= ttl/3 {
		fmt.Fprintf(d.out, "note: %v, after this process or Redis stood still for %v; not counted (I2 holds while both run)\n",
			err, stalled.Round(time.Millisecond))
		return
	}
	d.checks.add("held "+key, err)
}

// checkContender checks one attempt of the contender on key: it must fail
// while the job holds the lock and succeed once the job has released it.
func checkContender(key string, jobHolds, obtained bool) error {
	switch {
	case jobHolds && obtained:
		return fmt.Errorf("%s: the contender obtained it while the job held it", key)
	case !jobHolds && !obtained:
		return fmt.Errorf("%s: the contender could not obtain it after the release", key)
	}
	return nil
}

// checkReleased checks that a released lock's key stayed gone: nothing may
// re-create it (invariants I1, I3).
func checkReleased(key string, exists bool) error {
	if exists {
		return fmt.Errorf("%s: the key exists again after the release", key)
	}
	return nil
}

// checker collects broken checks. Each check has an id (the check and the
// key); the first failure of each is printed at once and kept, later ones
// are only counted. It is safe for concurrent use.
type checker struct {
	out    io.Writer
	mu     sync.Mutex // guards the fields below
	byID   map[string]int
	broken []brokenCheck
	n      int
}

type brokenCheck struct {
	msg string
	n   int
}

// add records err under id if it is not nil.
func (c *checker) add(id string, err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if i, ok := c.byID[id]; ok {
		c.broken[i].n++
		return
	}
	if c.byID == nil {
		c.byID = make(map[string]int)
	}
	c.byID[id] = len(c.broken)
	c.broken = append(c.broken, brokenCheck{err.Error(), 1})
	fmt.Fprintln(c.out, "BROKEN:", err)
}

// list returns each broken check with how often it broke, and the total.
func (c *checker) list() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.broken))
	for i, b := range c.broken {
		out[i] = b.msg
		if b.n > 1 {
			out[i] += fmt.Sprintf(" (%d times)", b.n)
		}
	}
	return out, c.n
}

// batch is a redislock lock over several keys (ObtainMulti, redislock
// v0.10.0 and newer), held beside the others: the registry tracks it as one
// lock, and the watchdog renews all its keys or none.
type batch struct {
	keys []string
	ttl  time.Duration
	lock *redislock.Lock
}

// multiObtainer is redislock's Client from v0.10.0 on, which can lock
// several keys at once.
type multiObtainer interface {
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error)
}

// obtainBatch takes the batch lock over three keys of one hash slot when
// the linked redislock can; it prints why not otherwise.
func (d *demo) obtainBatch(ctx context.Context, rl *redislock.Client, prefix string) error {
	m, ok := any(rl).(multiObtainer)
	if !ok {
		fmt.Fprintln(d.out, "job: the linked redislock has no ObtainMulti (it needs v0.10.0): no lock over several keys this run")
		return nil
	}
	b := &batch{ttl: d.cfg.reportTTL}
	for _, k := range []string{"a", "b", "c"} {
		b.keys = append(b.keys, "{"+prefix+"batch}:"+k)
	}
	return call(ctx, func(ctx context.Context) (err error) {
		b.lock, err = m.ObtainMulti(ctx, b.keys, b.ttl, nil)
		if err == nil {
			d.batch = b
		}
		return err
	})
}

// printTracked prints the locks the registry tracks, with every key.
func (d *demo) printTracked() {
	for _, l := range d.reg.Locks() {
		keys := l.Keys
		if keys == nil {
			keys = []string{l.Key}
		}
		fmt.Fprintf(d.out, "registry: tracking %s lock %s, TTL %v, keys %v\n", l.Source, l.Key, l.TTL, keys)
	}
}
