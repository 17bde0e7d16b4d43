package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// probeHelperEnv makes the test binary run a stall probe for probeHelperFor
// and print what it saw (TestStallProbeSeesAStoppedProcess).
const (
	probeHelperEnv = "LOCKWATCH_GOCRON_PROBE_HELPER"
	probeHelperFor = 2 * time.Second
)

// probeHelper is the helper process's side: "ready", then the stalls as
// JSON once probeHelperFor has passed.
func probeHelper() {
	p := startStallProbe()
	os.Stdout.WriteString("ready\n")
	time.Sleep(probeHelperFor)
	_ = json.NewEncoder(os.Stdout).Encode(p.stop())
}

// The stall probe sees its process stand still: a helper process running
// it is stopped (SIGSTOP) for 800 ms, then continued; the probe must report
// a stall of at least 600 ms. This is what the check's excuse rests on: an
// overlap is not judged only when the earlier holder's own process was
// seen standing still (summary.excuse).
func TestStallProbeSeesAStoppedProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), probeHelperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper's first line %q, %v: want ready", line, err)
	}
	time.Sleep(200 * time.Millisecond)
	const stopped = 800 * time.Millisecond
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stopped)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var stalls []stall
	if err := json.NewDecoder(r).Decode(&stalls); err != nil {
		t.Fatalf("helper's stalls: %v", err)
	}
	longest := time.Duration(0)
	for _, st := range stalls {
		longest = max(longest, st.Length)
	}
	if longest < stopped*3/4 {
		t.Errorf("the probe's longest stall %v (stalls %+v), want at least %v: the process was stopped for %v", longest, stalls, stopped*3/4, stopped)
	}
}
