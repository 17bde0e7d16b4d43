// Command lockwatch-demo shows lockwatch keeping two Redis locks alive through
// a job that runs longer than three of their TTLs.
//
// The job holds a github.com/bsm/redislock lock with a 2s TTL and a
// github.com/go-redsync/redsync/v4 mutex at redsync's default 8s expiry,
// taken through a go-redis client the registry watches. With redislock
// v0.10.0 or newer linked, it also holds a lock over three keys
// (ObtainMulti), which the registry tracks as one lock and the watchdog
// renews all or none; the demo lists the tracked locks with their keys. The watchdog runs
// with its default "@every 10s" schedule, so both locks are kept alive by
// its fast lane between ticks. Meanwhile a contender, on a client of its own,
// keeps trying to take both locks. Once a second the demo prints each key's
// remaining TTL (PTTL, read through an unwatched client), the watchdog's
// renewals of it and the contender's attempts. When the job ends it releases
// both locks, the contender takes them, and a summary follows.
//
// The demo checks as it goes that the contender never obtains a lock the job
// holds, that no held lock's remaining TTL falls below a third of its TTL,
// that the watchdog reports no lock lost, that no key comes back after its
// release, and that the contender obtains both locks once they are released.
// It exits 0 when every check held and 1 otherwise.
//
// The job runs under the context the watchdog hands it for its redislock
// lock (Watchdog.Context). With -steal, a third into the job another client
// overwrites that lock's key with its own value: the watchdog's next
// renewal finds it taken, the job's context is cancelled with
// watchdog.ErrLockTaken as its cause, and the job stops; the demo exits 0
// when it does.
//
// Usage:
//
//	lockwatch-demo [-redis host:port] [-duration 25s] [-steal] [-http host:port] [-v]
//
// Without -redis it starts an embedded miniredis whose TTLs run on the wall
// clock. With -redis it uses that server, under key names unique to the run,
// and deletes its keys at the end. -http serves, while the demo runs, the
// watchdog's counters at /metrics in Prometheus's text format (the names
// extra/lockwatchprom gives them) and its debug page at /debug/lockwatch.
// -v logs the watchdog to stderr.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

const (
	defaultDuration  = 25 * time.Second
	defaultReportTTL = 2 * time.Second
	redsyncExpiry    = 8 * time.Second // redsync's default; the demo does not change it
	opTimeout        = 2 * time.Second // bound on each of the demo's own Redis calls
	contenderTries   = 1               // the contender's redsync mutex tries once per attempt
	defaultPrintStep = time.Second
)

// config is what one run of the demo does. Flags set the first three
// fields; tests also shorten the others.
type config struct {
	redisAddr string        // "" starts an embedded miniredis
	duration  time.Duration // how long the job holds both locks
	verbose   bool          // log the watchdog to logOut
	steal     bool          // a thief overwrites the report lock a third into the job
	httpAddr  string        // "" serves nothing; else /metrics and /debug/lockwatch there

	reportTTL     time.Duration     // TTL of the redislock lock
	invoiceExpiry time.Duration     // expiry of the redsync mutex; 0 keeps redsync's default
	every         time.Duration     // status line period
	sample        time.Duration     // PTTL sampling period
	contendEvery  time.Duration     // pause between the contender's attempts
	settle        time.Duration     // wait after release before checking the keys stay gone
	extra         []watchdog.Option // appended to the watchdog's options (tests use it to break things)

	out, logOut io.Writer
}

func defaultConfig() config {
	return config{
		duration:     defaultDuration,
		reportTTL:    defaultReportTTL,
		every:        defaultPrintStep,
		sample:       100 * time.Millisecond,
		contendEvery: 250 * time.Millisecond,
		settle:       time.Second,
		out:          os.Stdout,
		logOut:       os.Stderr,
	}
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-demo:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("lockwatch-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.redisAddr, "redis", "", "use the Redis server at `host:port` instead of an embedded miniredis")
	fs.DurationVar(&cfg.duration, "duration", defaultDuration, "how long the job holds the locks")
	fs.BoolVar(&cfg.verbose, "v", false, "log the watchdog through slog to stderr")
	fs.StringVar(&cfg.httpAddr, "http", "", "serve /metrics (Prometheus text format) and the debug page /debug/lockwatch on `host:port` while the demo runs")
	fs.BoolVar(&cfg.steal, "steal", false, "a third into the job, another client overwrites the redislock lock's key with its own value: the job must stop, its context cancelled with ErrLockTaken")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lockwatch-demo [-redis host:port] [-duration 25s] [-steal] [-http host:port] [-v]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.duration <= 0 {
		return cfg, fmt.Errorf("-duration %v: must be positive", cfg.duration)
	}
	return cfg, nil
}

// held is one lock the job holds, as the checks see it.
type held struct {
	name, key, source string // name labels the status line
	ttl               time.Duration
}

// result is what a run observed.
type result struct {
	Keys     []string         // the lock keys, report first
	Held     time.Duration    // how long the job held them
	Renewals map[string]int64 // per key, the watchdog's renewals just before release
	Stats    watchdog.Stats   // after Stop
	Attempts int64            // the contender's attempts while the job held the locks
	Wins     int64            // of those, how many obtained a lock (should be 0)
	Broken   []string         // each check that broke, first occurrence, with a count
	NBroken  int              // how many times checks broke in all
	Stopped  error            // with -steal: why the job's context ended (ErrLockTaken expected)
}

// demo is one run's shared state.
type demo struct {
	cfg      config
	out      io.Writer
	checks   *checker
	observer *redis.Client // reads PTTL and EXISTS; never locks
	reg      *registry.Registry
	wd       *watchdog.Watchdog
	locks    []held // report, invoice
	c        *contender
	batch    *batch          // a lock over several keys; nil with a redislock that cannot take one
	jobCtx   context.Context // the job's context: ends when the report lock is no longer held
	stolen   atomic.Bool     // with -steal: the thief has overwritten the report lock's key
	thief    *redis.Client   // with -steal: the client that overwrites it
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

// run runs the demo once and returns an error when a check broke, the run
// was interrupted or it could not start.
func run(ctx context.Context, cfg config) (result, error) {
	var res result
	out := &syncWriter{w: cfg.out}
	d := &demo{cfg: cfg, out: out, checks: &checker{out: out}}

	addr, prefix := cfg.redisAddr, "demo:"
	if addr == "" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // TTLs run on the wall clock, as on a real server
		if err := m.Start(); err != nil {
			return res, fmt.Errorf("start miniredis: %w", err)
		}
		defer m.Close()
		addr = m.Addr()
	} else {
		prefix = uniquePrefix()
	}
	job := redis.NewClient(&redis.Options{Addr: addr})       // watched: the business code's client
	contender := redis.NewClient(&redis.Options{Addr: addr}) // another process, in effect
	d.observer = redis.NewClient(&redis.Options{Addr: addr})
	defer closeAll(job, contender, d.observer)
	if err := call(ctx, func(ctx context.Context) error { return d.observer.Ping(ctx).Err() }); err != nil {
		return res, fmt.Errorf("redis at %s: %w", addr, err)
	}

	invoiceTTL := redsyncExpiry
	var mutexOpts []redsync.Option
	if cfg.invoiceExpiry > 0 {
		invoiceTTL = cfg.invoiceExpiry
		mutexOpts = append(mutexOpts, redsync.WithExpiry(invoiceTTL))
	}
	d.locks = []held{
		{"report", prefix + "report", "redislock", cfg.reportTTL},
		{"invoice", prefix + "invoice", "redsync", invoiceTTL},
	}
	res.Keys = []string{d.locks[0].key, d.locks[1].key}
	if cfg.redisAddr != "" {
		defer func() {
			_ = call(ctx, func(ctx context.Context) error { return d.observer.Del(ctx, res.Keys...).Err() })
		}()
	}

	// Start-up, as an application does it.
	d.reg = registry.New(bsmredislock.New(), goredsync.New())
	if err := d.reg.Watch(job); err != nil {
		return res, err
	}
	logger := slog.New(slog.DiscardHandler)
	if cfg.verbose {
		logger = slog.New(slog.NewTextHandler(cfg.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts := append([]watchdog.Option{
		watchdog.WithLogger(logger),
		watchdog.WithOnLost(func(l registry.Lock, err error) {
			if d.stolen.Load() && l.Key == d.locks[0].key && errors.Is(err, watchdog.ErrLockTaken) {
				fmt.Fprintf(out, "watchdog: reported %s lost: %v\n", l.Key, err)
				return // what -steal does
			}
			d.checks.add("lost "+l.Key, fmt.Errorf("%s: the watchdog reported it lost: %w", l.Key, err))
		}),
	}, cfg.extra...)
	wd, err := watchdog.Attach(d.reg, opts...)
	if err != nil {
		return res, err
	}
	defer wd.Stop()
	d.wd = wd
	if cfg.httpAddr != "" {
		stopHTTP, err := serveHTTP(cfg.httpAddr, wd, out)
		if err != nil {
			return res, err
		}
		defer stopHTTP()
	}

	// Unchanged business code: take both locks.
	var report *redislock.Lock
	if err := call(ctx, func(ctx context.Context) (err error) {
		report, err = redislock.New(job).Obtain(ctx, d.locks[0].key, d.locks[0].ttl, nil)
		return err
	}); err != nil {
		return res, fmt.Errorf("obtain %s: %w", d.locks[0].key, err)
	}
	invoice := redsync.New(goredis.NewPool(job)).NewMutex(d.locks[1].key, mutexOpts...)
	if err := invoice.LockContext(ctx); err != nil {
		_ = call(ctx, report.Release)
		return res, fmt.Errorf("lock %s: %w", d.locks[1].key, err)
	}
	if err := d.obtainBatch(ctx, redislock.New(job), prefix); err != nil {
		_ = call(ctx, report.Release)
		_, _ = invoice.UnlockContext(ctx)
		return res, fmt.Errorf("obtain the batch lock: %w", err)
	}
	if d.batch != nil && cfg.redisAddr != "" {
		defer func() {
			_ = call(ctx, func(ctx context.Context) error { return d.observer.Del(ctx, d.batch.keys...).Err() })
		}()
	}
	fmt.Fprintf(out, "job: holding %s (redislock, TTL %v) and %s (redsync, expiry %v) for %v; watchdog schedule %s\n",
		d.locks[0].key, d.locks[0].ttl, d.locks[1].key, d.locks[1].ttl, cfg.duration, watchdog.DefaultSchedule)
	d.printTracked()
	// The job runs under a context that ends when its lock is no longer held.
	jobCtx, cancelJob := wd.Context(ctx, d.locks[0].key)
	defer cancelJob()
	d.jobCtx = jobCtx
	d.thief = contender
	if longest := max(d.locks[0].ttl, d.locks[1].ttl); cfg.duration < 3*longest {
		fmt.Fprintf(out, "note: -duration %v is shorter than three TTLs of the longest lock (%v); the checks still run\n", cfg.duration, 3*longest)
	}

	// The contender tries to take both locks until the job releases them.
	d.c = newContender(contender, d.locks, cfg.reportTTL, mutexOpts)
	cctx, stopContender := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.c.contend(cctx, cfg.contendEvery, d.checks)
	}()
	start := time.Now()
	interrupted := d.hold(ctx, start)
	res.Held = time.Since(start).Round(100 * time.Millisecond)
	stopContender()
	wg.Wait()
	res.Attempts, res.Wins = d.c.attempts.Load(), d.c.wins.Load()
	res.Renewals = renewalsOf(d.reg)

	if cfg.steal {
		res.Stopped = context.Cause(jobCtx)
		switch {
		case jobCtx.Err() == nil:
			d.checks.add("steal", fmt.Errorf("%s: overwritten by another client, but the job's context was never cancelled", d.locks[0].key))
		case !errors.Is(res.Stopped, watchdog.ErrLockTaken):
			d.checks.add("steal", fmt.Errorf("%s: the job's context ended with %v, want ErrLockTaken", d.locks[0].key, res.Stopped))
		}
	}

	// Unchanged business code: release the locks.
	if d.batch != nil {
		if err := call(ctx, d.batch.lock.Release); err != nil {
			d.checks.add("release batch", fmt.Errorf("%v: release failed, so the lock was lost while held: %w", d.batch.keys, err))
		}
	}
	if err := call(ctx, report.Release); cfg.steal {
		if !errors.Is(err, redislock.ErrLockNotHeld) {
			d.checks.add("release", fmt.Errorf("%s: release of the stolen lock = %v, want ErrLockNotHeld", d.locks[0].key, err))
		}
	} else if err != nil {
		d.checks.add("release", fmt.Errorf("%s: release failed, so the lock was lost while held: %w", d.locks[0].key, err))
	}
	if err := call(ctx, func(ctx context.Context) error {
		ok, err := invoice.UnlockContext(ctx)
		if err == nil && !ok {
			err = redsync.ErrLockAlreadyExpired
		}
		return err
	}); err != nil {
		d.checks.add("unlock", fmt.Errorf("%s: unlock failed, so the lock was lost while held: %w", d.locks[1].key, err))
	}

	d.afterRelease(ctx)
	wd.Stop()
	res.Stats = wd.Stats()
	res.Broken, res.NBroken = d.checks.list()
	printSummary(out, d.locks, d.batch, res)
	switch {
	case res.NBroken > 0:
		return res, fmt.Errorf("%d check(s) broke; first: %s", res.NBroken, res.Broken[0])
	case interrupted:
		return res, errors.New("interrupted before the job ended")
	}
	return res, nil
}

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
				d.checks.add("held "+l.key, checkHeld(l.key, l.ttl, pttl[i]))
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
					d.checks.add("held "+k, checkHeld(k, d.batch.ttl, ttl))
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

// contender is a second party, with its own client, its own redislock
// client and its own redsync mutex, that wants the job's locks.
type contender struct {
	locker   *redislock.Client
	mutex    *redsync.Mutex
	locks    []held // report, invoice
	ttl      time.Duration
	attempts atomic.Int64
	wins     atomic.Int64
}

func newContender(rdb *redis.Client, locks []held, reportTTL time.Duration, mutexOpts []redsync.Option) *contender {
	opts := append([]redsync.Option{redsync.WithTries(contenderTries)}, mutexOpts...)
	return &contender{
		locker: redislock.New(rdb),
		mutex:  redsync.New(goredis.NewPool(rdb)).NewMutex(locks[1].key, opts...),
		locks:  locks,
		ttl:    reportTTL,
	}
}

// contend tries to take both locks every pause until ctx ends. Any success
// breaks a check; the lock taken is given back at once.
func (c *contender) contend(ctx context.Context, pause time.Duration, checks *checker) {
	t := time.NewTicker(pause)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range c.locks {
			if ctx.Err() != nil {
				return
			}
			c.attempts.Add(1)
			release, err := c.try(ctx, i)
			if err == nil {
				c.wins.Add(1)
				checks.add("contender "+c.locks[i].key, checkContender(c.locks[i].key, true, true))
				release()
			}
		}
	}
}

// takeAll takes both locks once the job has released them, checks that it
// could, gives them back, and returns how many it took.
func (c *contender) takeAll(ctx context.Context, checks *checker) int {
	n := 0
	for i := range c.locks {
		release, err := c.try(ctx, i)
		checks.add("after "+c.locks[i].key, checkContender(c.locks[i].key, false, err == nil))
		if err == nil {
			n++
			release()
		}
	}
	return n
}

// try makes one attempt on lock i (0: the redislock lock, 1: the redsync
// mutex). On success it returns a function that releases the lock.
func (c *contender) try(ctx context.Context, i int) (release func(), err error) {
	if i == 0 {
		var l *redislock.Lock
		err = call(ctx, func(ctx context.Context) (err error) {
			l, err = c.locker.Obtain(ctx, c.locks[0].key, c.ttl, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		return func() { _ = call(ctx, l.Release) }, nil
	}
	if err := call(ctx, c.mutex.LockContext); err != nil {
		return nil, err
	}
	return func() {
		_ = call(ctx, func(ctx context.Context) error { _, err := c.mutex.UnlockContext(ctx); return err })
	}, nil
}

// call runs fn with a deadline of opTimeout. It is not cut short when ctx
// is cancelled, so that an interrupted demo still releases its locks.
func call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	return fn(ctx)
}

func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("lockwatch-demo:%d-%s:", os.Getpid(), hex.EncodeToString(b[:]))
}

func closeAll(clients ...*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// syncWriter serialises writes from the demo's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
