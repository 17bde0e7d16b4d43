package starved_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
)

// burnerEnv marks a burner process: the test binary re-executed to run
// TestHelperBurner. Without it TestHelperBurner skips.
const burnerEnv = "LOCKWATCH_STARVED_BURNER"

// burnerReady is what a burner prints on its standard output once every
// one of its spinning goroutines runs.
const burnerReady = "STARVED-BURNER-READY"

// burnerReadyWithin is a hang guard: how long a burner may take to start.
const burnerReadyWithin = 30 * time.Second

// TestHelperBurner is a CPU burner beside the starved holder: the test
// binary re-executed with burnerEnv set and GOMAXPROCS set to the number of
// CPUs. It spins one goroutine per P, doing nothing but arithmetic (no
// allocation, no system call), until its standard input ends; the parent
// kills it by its pid when it no longer needs it, and -test.timeout ends it
// should the parent vanish without closing its input.
func TestHelperBurner(t *testing.T) {
	if os.Getenv(burnerEnv) == "" {
		t.Skip("a CPU burner process of TestStarvedHolder; runs only as its child")
	}
	var quit atomic.Bool
	var started, done sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			x := uint64(1)
			for !quit.Load() {
				for range 1 << 14 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink.Add(x)
		}()
	}
	started.Wait()
	fmt.Println(burnerReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	quit.Store(true)
	done.Wait()
}

// burner is one burner process, as the parent runs it.
type burner struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	output harness.LockedBuffer // what it printed but its ready line
	ready  chan struct{}        // closed when it printed burnerReady
	exited chan struct{}        // closed once it has been waited for
	err    error                // its exit status; valid once exited is closed
	start  time.Time
	ran    time.Duration // wall time from its start to its end; valid once exited is closed
}

// burners is the set of burner processes of one run.
type burners struct {
	ps []*burner
}

// startBurners starts n burner processes, each spinning on every CPU of
// the machine, and waits until every one is spinning. Each lives at most
// life (its -test.timeout); t.Cleanup kills, by pid, any still running
// when the test ends.
func startBurners(t testing.TB, n int, life time.Duration) *burners {
	t.Helper()
	b := &burners{}
	for i := range n {
		p := &burner{ready: make(chan struct{}), exited: make(chan struct{})}
		p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperBurner$", "-test.count=1", "-test.timeout="+life.String())
		p.cmd.Env = append(os.Environ(), burnerEnv+"=1", fmt.Sprintf("GOMAXPROCS=%d", runtime.NumCPU()))
		p.cmd.Stderr = &p.output
		var err error
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatalf("burner %d: %v", i, err)
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatalf("burner %d: %v", i, err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start burner %d: %v", i, err)
		}
		p.start = time.Now()
		t.Cleanup(p.kill)
		go func() {
			defer close(p.exited)
			sc := bufio.NewScanner(stdout)
			readied := false
			for sc.Scan() {
				if sc.Text() == burnerReady && !readied {
					readied = true
					close(p.ready)
					continue
				}
				p.output.Write(append(sc.Bytes(), '\n'))
			}
			_, _ = io.Copy(io.Discard, stdout)
			p.err = p.cmd.Wait()
			p.ran = time.Since(p.start)
		}()
		b.ps = append(b.ps, p)
	}
	deadline := time.After(burnerReadyWithin)
	for i, p := range b.ps {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Fatalf("burner %d exited before it was ready: %v; output:\n%s", i, p.err, p.output.String())
		case <-deadline:
			t.Fatalf("burner %d not spinning within %v; output:\n%s", i, burnerReadyWithin, p.output.String())
		}
	}
	return b
}

// kill kills the burner by its pid unless it has exited, and waits for it.
func (p *burner) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.stdin.Close()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-p.exited
}

// stop kills every burner by its pid and returns the CPU time they used
// together and the wall time they ran, the longest of them; an error
// when one had exited before it was stopped (it did not burn throughout).
func (b *burners) stop() (cpu, wall time.Duration, err error) {
	if b == nil {
		return 0, 0, nil
	}
	var errs []error
	for i, p := range b.ps {
		select {
		case <-p.exited:
			errs = append(errs, fmt.Errorf("burner %d exited on its own after %v: %v; output:\n%s", i, p.ran.Round(time.Millisecond), p.err, p.output.String()))
		default:
		}
		p.kill()
		if st := p.cmd.ProcessState; st != nil {
			cpu += st.UserTime() + st.SystemTime()
		}
		wall = max(wall, p.ran)
	}
	return cpu, wall, errors.Join(errs...)
}
