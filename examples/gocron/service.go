package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	redislock "github.com/go-co-op/gocron-redis-lock/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// This file is the service: what each replica process runs. Everything else
// in the example starts the replicas and checks what they did.

// interval is how often each job is scheduled, in every replica.
const interval = time.Second

// jobNames are the service's jobs. Every replica schedules all of them; the
// distributed locker lets one replica at a time run each.
var jobNames = []string{"send-reports", "rebuild-index", "sync-invoices"}

// runLengths is how long the runs of a job take, in turn, from 0.5 s to
// 6 s: most outlive a lock expiry of 2 s. Job i starts at runLengths[2*i],
// so that the first run of every job does.
var runLengths = []time.Duration{
	4 * time.Second, 500 * time.Millisecond, 2500 * time.Millisecond,
	1 * time.Second, 3500 * time.Millisecond, 6 * time.Second,
}

// longestRun is the longest of runLengths.
const longestRun = 6 * time.Second

// stoppedPrefix starts the note of a run that stopped early because its
// lockwatch context (wd.Context) was cancelled: the lock may be lost.
const stoppedPrefix = "stopped: "

// replicaConfig is what the starting process hands a replica, as JSON in
// the environment variable envReplica.
type replicaConfig struct {
	Redis     string        `json:"redis"`
	RunID     string        `json:"run_id"` // names the journal and the jobs, so that runs sharing a Redis never meet
	Replica   int           `json:"replica"`
	Replicas  int           `json:"replicas"`
	Lockwatch bool          `json:"lockwatch"`
	Duration  time.Duration `json:"duration"`
	Expiry    time.Duration `json:"expiry"`
}

// lockKey is the lock's key of a job: gocron locks with the job's name, and
// redsync uses it as the key. The run's id is part of it.
func (c replicaConfig) lockKey(job string) string {
	return "lockwatch-example:gocron:" + c.RunID + ":" + job
}

// replicaMain runs one replica until its config's duration has passed and
// its runs under way have ended; it returns the process's exit code.
func replicaMain(env string, out io.Writer) int {
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(env), &cfg); err != nil {
		fmt.Fprintf(out, "replica: bad %s: %v\n", envReplica, err)
		return 2
	}
	// Whatever happens to the process that started this one, this one ends.
	deadline := time.AfterFunc(cfg.Duration+longestRun+30*time.Second, func() {
		fmt.Fprintf(out, "replica %d: still running long after its duration, exiting\n", cfg.Replica)
		os.Exit(3)
	})
	defer deadline.Stop()
	if err := serve(cfg, out); err != nil {
		fmt.Fprintf(out, "replica %d: %v\n", cfg.Replica, err)
		return 1
	}
	return 0
}

// serve is the service: a go-redis client, lockwatch attached to it at
// start-up, a gocron v2 scheduler whose distributed locker is the official
// Redis locker (redsync), and three jobs.
func serve(cfg replicaConfig, out io.Writer) error {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis})
	defer rdb.Close()
	// Not part of the service: how long this process stood still, for
	// the check (summary.excuse).
	probe := startStallProbe()

	var wd *watchdog.Watchdog
	if cfg.Lockwatch {
		// lockwatch, attached at start-up, before the client's first
		// command. Nothing else in the service changes.
		reg := registry.New(goredsync.New())
		if err := reg.Watch(rdb); err != nil {
			return err
		}
		var err error
		if wd, err = watchdog.Attach(reg); err != nil {
			return err // errors.Is(err, registry.ErrUpstreamChanged): do not start the service
		}
		defer wd.Stop()
	}

	// The locker as its README shows it: redsync on this client, one try
	// (a replica that does not get the lock skips that run), and an expiry
	// shorter than the longest run. redsync gives each acquire a share of the
	// expiry (5 % by default): a quarter leaves a loaded machine time to
	// answer.
	locker, err := redislock.NewRedisLocker(rdb,
		redislock.WithExpiry(cfg.Expiry),
		redislock.WithTries(1),
		redislock.WithTimeoutFactor(0.25),
	)
	if err != nil {
		return err
	}
	s, err := gocron.NewScheduler(
		gocron.WithDistributedLocker(locker),
		gocron.WithStopTimeout(longestRun+5*time.Second),
	)
	if err != nil {
		return err
	}

	svc := &service{cfg: cfg, wd: wd, journal: newJournal(rdb, cfg.RunID)}
	for i, name := range jobNames {
		job := job{name: name, key: cfg.lockKey(name), first: 2 * i}
		_, err := s.NewJob(
			gocron.DurationJob(interval),
			gocron.NewTask(func() { svc.run(job) }),
			// The job's name is its lock's key.
			gocron.WithName(job.key),
			// No second run of a job in one replica: only the lock keeps
			// the replicas' runs apart.
			gocron.WithSingletonMode(gocron.LimitModeReschedule),
		)
		if err != nil {
			return err
		}
	}

	mode := "without lockwatch"
	if wd != nil {
		mode = "lockwatch attached"
	}
	fmt.Fprintf(out, "replica %d: pid %d, %s, %d jobs every %s, lock expiry %s\n",
		cfg.Replica, os.Getpid(), mode, len(jobNames), interval, cfg.Expiry)
	// Replicas start at different moments, so their schedules tick at
	// different phases: the first to tick after a run ends gets the lock.
	stagger := time.Duration(0)
	if cfg.Replicas > 0 {
		stagger = time.Duration(cfg.Replica) * interval / time.Duration(cfg.Replicas)
	}
	time.Sleep(stagger)
	s.Start()
	time.Sleep(cfg.Duration - stagger)
	// Shutdown starts no new run and waits for the runs under way.
	err = s.Shutdown()

	svc.mu.Lock()
	line := fmt.Sprintf("replica %d: %d job runs, the longest %.1fs", cfg.Replica, svc.runs.Load(), svc.longest.Seconds())
	svc.mu.Unlock()
	if wd != nil {
		st := wd.Stats()
		line += fmt.Sprintf("; lockwatch: %d renewals, %d locks lost, %d holders told a lock may be lost",
			st.Renewals, st.Lost, st.Unconfirmed)
	}
	stalls := probe.stop()
	if len(stalls) > 0 {
		longest := slices.MaxFunc(stalls, func(a, b stall) int { return cmp.Compare(a.Length, b.Length) })
		line += fmt.Sprintf("; the process stood still %d times, up to %.2fs", len(stalls), longest.Length.Seconds())
	}
	fmt.Fprintln(out, line)
	if err != nil {
		return fmt.Errorf("scheduler shutdown: %w", err)
	}
	if err := svc.journal.writeStalls(context.Background(), cfg.Replica, stalls); err != nil {
		return fmt.Errorf("writing the stalls: %w", err)
	}
	return svc.journalErr()
}

// stall is a time the process stood still: a goroutine that asked to be
// woken was not run for that long (the machine did not run the process,
// it was stopped, or its goroutines waited for a CPU).
type stall struct {
	End    time.Time
	Length time.Duration
}

// stallProbe measures how long the process stands still: a goroutine that
// asks to be woken every probeEvery and notes each wake that came
// probeNote or more late.
type stallProbe struct {
	done  chan struct{}
	ended chan []stall
}

const (
	probeEvery = 10 * time.Millisecond
	probeNote  = 100 * time.Millisecond
)

func startStallProbe() *stallProbe {
	p := &stallProbe{done: make(chan struct{}), ended: make(chan []stall, 1)}
	go func() {
		var ss []stall
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-p.done:
				p.ended <- ss
				return
			case <-t.C:
			}
			now := time.Now()
			if late := now.Sub(last) - probeEvery; late >= probeNote {
				ss = append(ss, stall{End: now, Length: late})
			}
			last = now
		}
	}()
	return p
}

// stop ends the probe and returns the stalls it saw.
func (p *stallProbe) stop() []stall {
	close(p.done)
	return <-p.ended
}

// job is one of the service's jobs.
type job struct {
	name  string
	key   string // its lock's key
	first int    // where its runs start in runLengths
}

// service holds what the jobs' runs share.
type service struct {
	cfg     replicaConfig
	wd      *watchdog.Watchdog // nil without lockwatch
	journal journal
	runs    atomic.Int64

	mu      sync.Mutex
	err     error         // the first journal write that failed
	longest time.Duration // the longest run so far
}

// run is one run of a job, under its lock: gocron obtained it before
// calling run and releases it when run returns. The run journals its start
// and its end, and works for as long as runLengths says. With lockwatch, it
// stops early if told its lock may be lost (wd.Context), as a job should.
func (s *service) run(j job) {
	ctx := context.Background()
	n, err := s.journal.start(ctx, j.name, s.cfg.Replica)
	if err != nil {
		s.fail(err)
		return
	}
	s.runs.Add(1)
	work, cancel := ctx, context.CancelFunc(func() {})
	if s.wd != nil {
		work, cancel = s.wd.Context(ctx, j.key)
	}
	note := "done"
	began := time.Now()
	select {
	case <-time.After(runLengths[(j.first+n-1)%len(runLengths)]):
	case <-work.Done():
		note = stoppedPrefix + context.Cause(work).Error()
	}
	cancel()
	s.mu.Lock()
	s.longest = max(s.longest, time.Since(began))
	s.mu.Unlock()
	if err := s.journal.end(ctx, j.name, s.cfg.Replica, n, note); err != nil {
		s.fail(err)
	}
}

func (s *service) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *service) journalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return errors.Join(errors.New("journal write failed"), s.err)
	}
	return nil
}
