package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// caseProc is one case set up in a child process, driven line by line:
// "sweep" answers a sample, "done" the case's other figures.
type caseProc struct {
	impl string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	errb *bytes.Buffer
}

func startCase(ctx context.Context, addr, impl string, n int) (*caseProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &caseProc{impl: impl, errb: &bytes.Buffer{}}
	p.cmd = exec.CommandContext(ctx, exe, "-child", impl, "-n", strconv.Itoa(n), "-redis", addr,
		"-per-lock-pool-timeout", perLockPoolTimeout.String())
	p.cmd.Stderr = p.errb
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 1<<16), 1<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	var ready struct {
		Ready bool   `json:"ready"`
		Error string `json:"error"`
	}
	if err := p.read(&ready); err != nil {
		p.kill()
		return nil, err
	}
	if !ready.Ready {
		p.kill()
		return nil, errors.New(ready.Error)
	}
	return p, nil
}

func (p *caseProc) read(into any) error {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: %w: %s", p.impl, err, strings.TrimSpace(p.errb.String()))
	}
	return json.Unmarshal(p.out.Bytes(), into)
}

func (p *caseProc) sweep() (sample, error) {
	if _, err := io.WriteString(p.in, "sweep\n"); err != nil {
		return sample{}, err
	}
	var s sampleJSON
	if err := p.read(&s); err != nil {
		return sample{}, err
	}
	if s.Error != "" {
		return sample{}, errors.New(s.Error)
	}
	return sample{time.Duration(s.WallNS), time.Duration(s.ClientCPUNS), time.Duration(s.ServerCPUNS), s.Failed, s.Nodes}, nil
}

func (p *caseProc) finish() (result, error) {
	if _, err := io.WriteString(p.in, "done\n"); err != nil {
		return result{}, err
	}
	var r result
	err := p.read(&r)
	return r, err
}

func (p *caseProc) kill() {
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// spawnJSON runs a one-shot child and decodes its single JSON answer.
func spawnJSON(ctx context.Context, args []string, into any) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(errOut.String()))
	}
	if err := json.Unmarshal(out.Bytes(), into); err != nil {
		return fmt.Errorf("child output %q: %w", out.String(), err)
	}
	return nil
}

// runChild runs one case in this process: "fault" answers once; the others
// set up, answer {"ready":true}, then a sample per "sweep" line and their
// figures on "done" (or when stdin ends).
func runChild(impl, addr string, n int, stdin io.Reader, stdout io.Writer) error {
	if addr == "" {
		return errors.New("-child needs -redis")
	}
	if n < 1 {
		return fmt.Errorf("-n %d: need a positive lock count", n)
	}
	ctx := context.Background()
	enc := json.NewEncoder(stdout)
	switch impl {
	case "fault":
		f, err := runFault(ctx, addr, n, 3)
		if err != nil {
			return err
		}
		return enc.Encode(f)
	case "neighbour-default", "neighbour-small":
		r, err := runNeighbour(ctx, addr, n, strings.TrimPrefix(impl, "neighbour-"))
		if err != nil {
			r.Error = err.Error()
		}
		return enc.Encode(r)
	case "storm-with-default", "storm-with-small", "storm-without-default", "storm-without-small":
		r, err := runStorm(ctx, addr, n, impl)
		if err != nil {
			r.Error = err.Error()
		}
		return enc.Encode(r)
	case "clients-watched", "clients-unwatched":
		r, err := runClients(ctx, addr, n, impl == "clients-watched")
		if err != nil {
			return err
		}
		return enc.Encode(r)
	case "memory-watched", "memory-unwatched":
		m, err := runMemory(ctx, addr, n, impl == "memory-watched")
		if err != nil {
			return err
		}
		return enc.Encode(m)
	}
	setup, ok := cases[impl]
	if impl == clusterCase {
		setup, ok = setupCluster, true
	}
	if !ok {
		return fmt.Errorf("-child: unknown case %q", impl)
	}
	b, err := setup(ctx, addr, casePrefix(impl), n)
	if err != nil {
		return enc.Encode(map[string]any{"ready": false, "error": err.Error()})
	}
	defer b.close()
	if err := enc.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		switch in.Text() {
		case "sweep":
			s, err := b.sweep(ctx)
			out := sampleJSON{WallNS: int64(s.wall), ClientCPUNS: int64(s.clientCPU), ServerCPUNS: int64(s.serverCPU), Failed: s.failed, Nodes: s.nodes}
			if err != nil {
				out.Error = err.Error()
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
		case "done":
			r := b.finish()
			r.PeakRSSMB = peakRSSMB()
			return enc.Encode(r)
		default:
			return fmt.Errorf("-child: unknown request %q", in.Text())
		}
	}
	return in.Err()
}

// casePrefix gives each case's keys their own prefix of the same length,
// so that cases set up side by side share a server without sharing keys.
func casePrefix(impl string) string {
	switch impl {
	case "lockwatch":
		return "lw"
	case "per-lock":
		return "pl"
	case "redisson-style":
		return "rs"
	case "ceiling":
		return "ce"
	case clusterCase:
		return "cl"
	}
	return "xx"
}
