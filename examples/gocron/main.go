// Command gocron shows lockwatch in the most common place Go services lock:
// replicas of a service that run the same go-co-op/gocron v2 jobs under a
// distributed locker (gocron.WithDistributedLocker) built on redsync, with
// lock expiries of a few seconds and runs that sometimes take longer.
//
// It starts -replicas processes (copies of itself), each a replica of the
// service in service.go: a go-redis client, lockwatch attached at start-up,
// the official Redis locker, and three jobs scheduled every second whose
// runs take 0.5 s to 6 s under locks that expire after 2 s. Every run
// journals its start and end in Redis. When the replicas have stopped, it
// replays the journal and checks that no run of a job started while another
// run of the same job was still running.
//
//	go run . -redis 127.0.0.1:6379                                   # lockwatch: 0 overlaps, exit 0
//	go run . -redis 127.0.0.1:6379 -lockwatch=false -expect-overlaps # the control: overlaps, exit 0
//
// Exit status: 0 when the check holds (no overlap and at least one run that
// outlived the lock's expiry; with -expect-overlaps, at least one overlap),
// 1 when it does not, 2 when the scenario could not run (no -redis, Redis
// unreachable, a replica failed).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// envReplica, when set, makes the process a replica of the service; its
// value is the replica's configuration as JSON.
const envReplica = "LOCKWATCH_GOCRON_EXAMPLE_REPLICA"

func main() {
	if env := os.Getenv(envReplica); env != "" {
		os.Exit(replicaMain(env, os.Stdout))
	}
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's.
type options struct {
	Redis          string
	Duration       time.Duration
	Replicas       int
	Expiry         time.Duration
	Lockwatch      bool
	ExpectOverlaps bool

	// For tests: replica 0's process is stopped (SIGSTOP) stopAt after
	// the journal shows its first run's start, for stopFor, then
	// continued; zero stopFor: never.
	stopAt, stopFor time.Duration
}

// cli parses the command line, runs the scenario and returns the exit code.
func cli(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gocron", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.Redis, "redis", "", "Redis `host:port` where the replicas lock and journal (required)")
	fs.DurationVar(&o.Duration, "duration", 20*time.Second, "how long the replicas schedule jobs; runs under way then finish (up to 6s more)")
	fs.IntVar(&o.Replicas, "replicas", 3, "replica processes")
	fs.DurationVar(&o.Expiry, "expiry", 2*time.Second, "the locks' expiry (redsync's WithExpiry); runs take 0.5s to 6s")
	fs.BoolVar(&o.Lockwatch, "lockwatch", true, "attach lockwatch in every replica; false runs the control")
	fs.BoolVar(&o.ExpectOverlaps, "expect-overlaps", false, "the control's verdict: exit 0 only if runs overlapped (with -lockwatch=false)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run . -redis host:port [-duration 20s] [-replicas 3] [-expiry 2s] [-lockwatch=false -expect-overlaps]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(stderr, "gocron:", err)
		fs.Usage()
		return 2
	}
	s, err := runScenario(context.Background(), o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "gocron:", err)
		return 2
	}
	code, msg := verdict(s, o)
	fmt.Fprintln(stdout, msg)
	return code
}

func (o options) validate() error {
	switch {
	case o.Redis == "":
		return errors.New("-redis host:port is required (this example starts no server)")
	case o.Duration < 2*interval:
		return fmt.Errorf("-duration %s: at least %s", o.Duration, 2*interval)
	case o.Replicas < 2:
		return fmt.Errorf("-replicas %d: at least 2", o.Replicas)
	case o.Expiry < 100*time.Millisecond:
		return fmt.Errorf("-expiry %s: at least 100ms", o.Expiry)
	case o.ExpectOverlaps && o.Lockwatch:
		return errors.New("-expect-overlaps is the control's verdict: use it with -lockwatch=false")
	}
	return nil
}

// runScenario starts the replicas, waits for them, and returns what their
// journal shows. An error means the scenario could not run as designed.
func runScenario(ctx context.Context, o options, out io.Writer) (*summary, error) {
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: o.Redis})
	defer rdb.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", o.Redis, err)
	}
	j := newJournal(rdb, runID)
	defer func() { _ = j.remove(context.Background()) }()

	mode := "with lockwatch"
	if !o.Lockwatch {
		mode = "without lockwatch (the control)"
	}
	fmt.Fprintf(out, "run %s: %d replicas, %s, %d jobs every %s for %s, lock expiry %s, runs of 0.5s to 6s\n",
		runID, o.Replicas, mode, len(jobNames), interval, o.Duration, o.Expiry)
	if err := startReplicas(ctx, o, runID, j, out); err != nil {
		return nil, err
	}

	events, err := j.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	s := analyze(events, o.Replicas, o.Expiry)
	stalls, err := j.readStalls(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stalls: %w", err)
	}
	s.excuse(stalls)
	s.print(out, o.Lockwatch)
	return s, nil
}

// startReplicas runs o.Replicas copies of this program as replicas and
// waits until every one has exited. Their output goes to out, a line at a
// time.
func startReplicas(ctx context.Context, o options, runID string, j journal, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// A replica ends by itself after its duration and its last runs; this
	// bound only matters if one hangs.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+longestRun+45*time.Second)
	defer cancel()
	lines := &lineWriter{out: out}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range o.Replicas {
		cfg, err := json.Marshal(replicaConfig{
			Redis: o.Redis, RunID: runID, Replica: i, Replicas: o.Replicas, Lockwatch: o.Lockwatch,
			Duration: o.Duration, Expiry: o.Expiry,
		})
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), envReplica+"="+string(cfg))
		w := lines.writer()
		cmd.Stdout, cmd.Stderr = w, w
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			cancel() // kills the replicas started so far
			wg.Wait()
			return fmt.Errorf("starting replica %d: %w", i, err)
		}
		if i == 0 && o.stopFor > 0 {
			go stopWhileRunning(ctx, j, cmd.Process, o.stopAt, o.stopFor)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			w.flush()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("replica %d (pid %d): %w", i, cmd.Process.Pid, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopWhileRunning, for tests, stops replica 0's process p (SIGSTOP) at
// after the journal first shows a run of it started, and continues it
// (SIGCONT) after d.
func stopWhileRunning(ctx context.Context, j journal, p *os.Process, at, d time.Duration) {
	for ctx.Err() == nil {
		events, _ := j.read(ctx)
		for _, e := range events {
			if e.Start && e.Replica == 0 {
				time.Sleep(at)
				if p.Signal(syscall.SIGSTOP) == nil {
					time.Sleep(d)
					_ = p.Signal(syscall.SIGCONT)
				}
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verdict decides the exit code and says why.
func verdict(s *summary, o options) (int, string) {
	switch {
	case len(s.Runs) == 0:
		return 1, "FAIL: no job ran"
	case s.Unfinished > 0:
		return 1, fmt.Sprintf("FAIL: %d runs have a start and no end in the journal", s.Unfinished)
	case o.ExpectOverlaps && len(s.Overlaps)+len(s.Excused) > 0:
		return 0, fmt.Sprintf("PASS (control): without lockwatch, %d runs started while another run of the same job was still running; the check catches it",
			len(s.Overlaps)+len(s.Excused))
	case o.ExpectOverlaps:
		return 1, "FAIL (control): no run overlapped another, so this run does not show that the check can fail (try a longer -duration)"
	case len(s.Overlaps) > 0:
		return 1, fmt.Sprintf("FAIL: %d runs started while another run of the same job was still running", len(s.Overlaps))
	case s.Outlived == 0:
		return 1, fmt.Sprintf("FAIL: no run outlived the lock's %s expiry, so this run shows nothing (try a longer -duration)", s.Expiry)
	}
	msg := fmt.Sprintf("PASS: no two runs of the same job overlapped; %d of %d runs outlived their lock's %s expiry",
		s.Outlived, len(s.Runs), s.Expiry)
	if len(s.Excused) > 0 {
		msg = fmt.Sprintf("PASS: no two runs of the same job overlapped but %d not judged (the earlier run's process stood still: see above); %d of %d runs outlived their lock's %s expiry",
			len(s.Excused), s.Outlived, len(s.Runs), s.Expiry)
	}
	return 0, msg
}

// print writes the summary: a table per job, then the overlaps.
func (s *summary) print(out io.Writer, lockwatch bool) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\njournal: %d runs\n", len(s.Runs))
	fmt.Fprintf(&b, "%-14s %5s  %-12s %8s  %15s  %11s\n", "job", "runs", "per replica", "longest", "outlived expiry", "overlapping")
	for _, j := range s.byJob() {
		var per []string
		for r := range s.Replicas {
			per = append(per, fmt.Sprint(j.PerReplica[r]))
		}
		fmt.Fprintf(&b, "%-14s %5d  %-12s %7.1fs  %15d  %11d\n",
			j.Job, j.Runs, strings.Join(per, "/"), j.Longest.Seconds(), j.Outlived, j.Overlapping)
	}
	fmt.Fprintf(&b, "runs that outlived the lock's %s expiry: %d\n", s.Expiry, s.Outlived)
	if lockwatch {
		fmt.Fprintf(&b, "runs stopped early, told their lock may be lost: %d\n", s.Stopped)
	}
	if s.Unfinished > 0 {
		fmt.Fprintf(&b, "runs with no end: %d\n", s.Unfinished)
	}
	fmt.Fprintf(&b, "overlapping runs: %d\n", len(s.Overlaps))
	const shown = 5
	for i, o := range s.Overlaps {
		if i == shown {
			fmt.Fprintf(&b, "  ... and %d more\n", len(s.Overlaps)-shown)
			break
		}
		fmt.Fprintf(&b, "  %s started at %s while %s (started at %s) was still running\n",
			o.Later, s.since(o.Later.Start), o.Earlier, s.since(o.Earlier.Start))
	}
	if len(s.Excused) > 0 {
		fmt.Fprintf(&b, "overlapping runs not judged, the earlier run's process having stood still two thirds of the expiry or more (no watchdog can renew then): %d\n", len(s.Excused))
		for _, o := range s.Excused {
			fmt.Fprintf(&b, "  %s started at %s while %s (started at %s) was still running; replica %d stood still %.2fs\n",
				o.Later, s.since(o.Later.Start), o.Earlier, s.since(o.Earlier.Start), o.Earlier.Replica, o.Stall.Seconds())
		}
	}
	_, _ = out.Write(b.Bytes())
}

func newRunID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// lineWriter hands out writers that pass whole lines to out, one writer's
// line at a time, so that the replicas' lines do not interleave.
type lineWriter struct {
	mu  sync.Mutex
	out io.Writer
}

func (l *lineWriter) writer() *replicaOutput { return &replicaOutput{l: l} }

// replicaOutput is one replica's stdout and stderr.
type replicaOutput struct {
	l   *lineWriter
	mu  sync.Mutex
	buf []byte
}

func (w *replicaOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if i := bytes.LastIndexByte(w.buf, '\n'); i >= 0 {
		w.emit(w.buf[:i+1])
		w.buf = append(w.buf[:0], w.buf[i+1:]...)
	}
	return len(p), nil
}

// flush writes what is left, once the replica has exited.
func (w *replicaOutput) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(append(w.buf, '\n'))
		w.buf = nil
	}
}

func (w *replicaOutput) emit(p []byte) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		fmt.Fprintf(w.l.out, "  %s\n", sc.Text())
	}
}
