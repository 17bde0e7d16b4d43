package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/internal/testredis"
)

// The parent runs each case in a child process of the same binary: under
// go test that binary is the test binary, which must then act as the
// command.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "lockwatch-bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A small run end to end, on a real server: every case answers, the JSON
// has the documented fields with plausible values, and lockwatch renewed
// every lock in each sweep (a case that renews fewer fails the run).
func TestRunJSON(t *testing.T) {
	srv := testredis.Start(t)
	var out, errb bytes.Buffer
	err := run([]string{"-json", "-redis", srv.Addr, "-locks", "300", "-sweeps", "1", "-hook-rounds", "1"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	var rep struct {
		Cases []map[string]any `json:"cases"`
		Hook  map[string]any   `json:"hook"`
		Fault *struct {
			Lockwatch faultSide `json:"lockwatch"`
			Redisson  faultSide `json:"redisson_style"`
			Locks     int       `json:"locks"`
		} `json:"fault"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	impls := map[string]bool{}
	for _, c := range rep.Cases {
		impl, _ := c["impl"].(string)
		impls[impl] = true
		if c["locks"] != float64(300) {
			t.Errorf("%s: locks = %v, want 300", impl, c["locks"])
		}
		for _, f := range []string{"sweep_ms", "renewals_per_sec", "client_cpu_ms", "server_cpu_ms", "bytes_per_lock"} {
			v, ok := c[f].(float64)
			if !ok || v < 0 || (f != "client_cpu_ms" && f != "server_cpu_ms" && v == 0) {
				t.Errorf("%s: %s = %v, want a positive number", impl, f, c[f])
			}
		}
	}
	for _, want := range caseOrder {
		if !impls[want] {
			t.Errorf("no %q case in %v", want, impls)
		}
	}
	for _, f := range []string{"overhead_ns", "allocs_per_op"} {
		if _, ok := rep.Hook[f].(float64); !ok {
			t.Errorf("hook.%s = %v, want a number", f, rep.Hook[f])
		}
	}
	if rep.Fault == nil {
		t.Fatal("no fault object")
	}
	if l := rep.Fault.Lockwatch; l.FailedLocks == 0 || l.RenewedInTick != rep.Fault.Locks-l.FailedLocks {
		t.Errorf("fault isolation: lockwatch renewed %d of %d with %d failed, want all the others", l.RenewedInTick, rep.Fault.Locks, l.FailedLocks)
	}
	if r := rep.Fault.Redisson; r.RenewedInTick >= rep.Fault.Locks-r.FailedLocks {
		t.Errorf("fault isolation: redisson-style renewed %d of %d, want it to stop at the failed chunk", r.RenewedInTick, rep.Fault.Locks)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-locks", "0"},
		{"-locks", "10,x"},
		{"-cases", "lockwatch,nope"},
		{"-sweeps", "0"},
		{"-hook-rounds", "0"},
		{"-per-lock-pool-timeout", "0s"},
		{"extra"},
		{"-child", "lockwatch"},
		{"-child", "nope", "-redis", "127.0.0.1:1", "-n", "5"},
	} {
		var out, errb bytes.Buffer
		err := run(args, &out, &errb)
		if err == nil {
			t.Errorf("run(%q) = nil error, want one", args)
			continue
		}
		if name := strings.TrimLeft(args[0], "-"); !strings.Contains(err.Error()+errb.String(), name) && args[0] != "extra" {
			t.Errorf("run(%q) = %v, want the error to name %q", args, err, name)
		}
	}
}

func TestParseLocks(t *testing.T) {
	got, err := parseLocks("", true)
	if err != nil || fmt.Sprint(got) != "[1000 10000 100000 1000000]" {
		t.Errorf("parseLocks(\"\", full) = %v, %v", got, err)
	}
	got, err = parseLocks("", false)
	if err != nil || fmt.Sprint(got) != "[1000 10000 100000]" {
		t.Errorf("parseLocks(\"\", !full) = %v, %v", got, err)
	}
	got, err = parseLocks(" 5, 7", false)
	if err != nil || fmt.Sprint(got) != "[5 7]" {
		t.Errorf("parseLocks(\" 5, 7\") = %v, %v", got, err)
	}
}
