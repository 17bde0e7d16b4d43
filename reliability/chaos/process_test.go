package chaos_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
)

// workerProc is one worker process: the test binary, re-executed to run
// TestHelperWorker with workerEnv set.
type workerProc struct {
	cfg    workerConfig
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	output harness.LockedBuffer // its standard error and its standard output but the ready line
	ready  chan struct{}        // closed when it printed readyLine
	exited chan struct{}        // closed once it has been waited for
	err    error                // its exit status; valid once exited is closed
	paused atomic.Bool          // between pause and resume
}

// Hang guards of the parent: how long a worker may take to be ready, and
// to exit once told to stop (its jobs in progress, up to MaxJob plus a
// release, then the watchdog's Stop and the leak check of its TestMain).
// Not timing assertions: only a hang reaches them.
const (
	readyWithin = 60 * time.Second
	exitWithin  = 60 * time.Second
)

// startWorkers starts one process per configuration, each to be ended by
// its Go test timeout after timeout at the latest; t.Cleanup kills, by pid,
// every one still running when the test ends (continuing it first if it
// was paused).
func startWorkers(t *testing.T, cfgs []workerConfig, timeout time.Duration) []*workerProc {
	t.Helper()
	var ps []*workerProc
	for _, cfg := range cfgs {
		spec, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := &workerProc{cfg: cfg, ready: make(chan struct{}), exited: make(chan struct{})}
		// -test.timeout bounds a worker on its own, should its parent vanish
		// without closing its standard input.
		p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperWorker$", "-test.count=1", "-test.timeout="+timeout.String())
		p.cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
		p.cmd.Stderr = &p.output
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", cfg.Proc, err)
		}
		t.Cleanup(p.kill)
		go func() {
			defer close(p.exited)
			sc := bufio.NewScanner(stdout)
			readied := false
			for sc.Scan() {
				if sc.Text() == readyLine && !readied {
					readied = true
					close(p.ready)
					continue
				}
				p.output.Write(append(sc.Bytes(), '\n'))
			}
			_, _ = io.Copy(io.Discard, stdout)
			p.err = p.cmd.Wait()
		}()
		ps = append(ps, p)
	}
	deadline := time.After(readyWithin)
	for _, p := range ps {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Fatalf("worker %d exited before it was ready: %v; output:\n%s", p.cfg.Proc, p.err, p.output.String())
		case <-deadline:
			t.Fatalf("worker %d not ready within %v; output:\n%s", p.cfg.Proc, readyWithin, p.output.String())
		}
	}
	return ps
}

// begin tells every worker to start working.
func begin(t *testing.T, ps []*workerProc) {
	t.Helper()
	for _, p := range ps {
		if _, err := io.WriteString(p.stdin, goLine+"\n"); err != nil {
			t.Fatalf("start worker %d: %v", p.cfg.Proc, err)
		}
	}
}

// finish tells every worker to stop taking jobs and waits for all of them
// to exit; it returns the failures of those that did not exit cleanly.
func finish(t *testing.T, ps []*workerProc) []string {
	t.Helper()
	for _, p := range ps {
		_ = p.stdin.Close()
	}
	deadline := time.After(exitWithin)
	var failed []string
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-deadline:
			t.Fatalf("worker %d did not exit within %v of being told to stop; output:\n%s", p.cfg.Proc, exitWithin, p.output.String())
		}
		if p.err != nil {
			failed = append(failed, fmt.Sprintf("worker %d: %v; output:\n%s", p.cfg.Proc, p.err, p.output.String()))
		}
	}
	return failed
}

// partition tells the worker to cut itself off from every cluster node
// for d (see worker.partition); it heals on its own.
func (p *workerProc) partition(d time.Duration) error {
	_, err := fmt.Fprintf(p.stdin, "%s %s\n", partitionLine, d)
	return err
}

// contend tells the worker to contend for every key for d (see
// worker.contend).
func (p *workerProc) contend(d time.Duration) error {
	_, err := fmt.Fprintf(p.stdin, "%s %s\n", contendLine, d)
	return err
}

// pause stops the worker's process (SIGSTOP); resume continues it.
func (p *workerProc) pause() error {
	p.paused.Store(true)
	return p.cmd.Process.Signal(syscall.SIGSTOP)
}

func (p *workerProc) resume() error {
	err := p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused.Store(false)
	return err
}

// kill kills the process by pid unless it has exited, and waits for it.
func (p *workerProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-p.exited
}
