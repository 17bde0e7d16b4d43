package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// report is the -json output.
type report struct {
	Cases []result     `json:"cases"`
	Hook  hookResult   `json:"hook"`
	Fault *faultResult `json:"fault,omitempty"`
	// Memory is the memory case, one entry per size (-memory-locks).
	Memory []memoryResult `json:"memory,omitempty"`
	// Cluster is the cluster case (-cluster).
	Cluster *clusterResult `json:"cluster,omitempty"`
	// Neighbour is the neighbour case (-cases neighbour).
	Neighbour *neighbourResult `json:"neighbour,omitempty"`
	// Storm is the storm case (-cases storm).
	Storm *stormResult `json:"storm,omitempty"`
	// Clients is the clients case (-cases clients).
	Clients *clientsResult `json:"clients,omitempty"`
	Env     envInfo        `json:"env"`
}

type envInfo struct {
	Redis     string `json:"redis_version"`
	Addr      string `json:"redis_addr"`
	Go        string `json:"go_version"`
	CPUs      int    `json:"cpus"`
	OS        string `json:"os"`
	Sweeps    int    `json:"sweeps"`
	StartedAt string `json:"started_at"`
}

func printTable(w io.Writer, rep report) {
	e := rep.Env
	fmt.Fprintf(w, "lockwatch-bench: Redis %s at %s, %s, %s, %d CPUs; median of %d sweeps\n\n",
		e.Redis, e.Addr, e.Go, e.OS, e.CPUs, e.Sweeps)
	printCases(w, rep.Cases)
	h := rep.Hook
	fmt.Fprintf(w, "\nhook: GET %.1f ns watched vs %.1f ns unwatched (+%.1f ns), SET %.1f vs %.1f ns (+%.1f ns); overhead %.1f ns, %.0f allocs/op (median of %d rounds)\n",
		h.GetNS[0], h.GetNS[1], h.GetOverNS, h.SetNS[0], h.SetNS[1], h.SetOverNS, h.OverheadNS, h.AllocsPerOp, h.Rounds)
	printCluster(w, rep.Cluster)
	printMemory(w, rep.Memory)
	printNeighbour(w, rep.Neighbour)
	printStorm(w, rep.Storm)
	printClients(w, rep.Clients)
	if f := rep.Fault; f != nil {
		printFault(w, *f)
	}
}

// ratio prints a ratio, or "-" when there is none.
func ratio(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// newTable returns a writer that aligns tab-separated columns to the right.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// printCases prints the sweep cases' table.
func printCases(w io.Writer, cs []result) {
	if len(cs) == 0 {
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "locks\tcase\tsweep ms\trenewals/s\tclient CPU ms\tserver CPU ms\twall/server CPU\tB/lock\tB/lock beyond key+value\tpeak RSS MB\tlockwatch faster\t")
	for _, r := range cs {
		speed := "-"
		if r.Speedup > 0 {
			speed = fmt.Sprintf("%.2fx", r.Speedup)
		}
		beyond := r.BytesPerLock - r.KeyValueBytes
		if r.Impl == "per-lock" {
			beyond = r.BytesPerLock // the key and value are the application's Lock's
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.0f\t%.1f\t%.1f\t%s\t%.0f\t%.0f\t%.0f\t%s\t\n",
			r.Locks, r.Impl, r.SweepMS, r.RenewalsPerSec, r.ClientCPUMS, r.ServerCPUMS, ratio(r.WallOverServerCPU),
			r.BytesPerLock, beyond, r.PeakRSSMB, speed)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  wall/server CPU: each sweep's wall time over the Redis CPU time measured across it (INFO cpu before and after), median over the sweeps; 1.00 = Redis busy the whole sweep")
	for _, r := range cs {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s at %d: %s\n", r.Impl, r.Locks, r.Note)
		}
		if r.FailedRenewals > 0 {
			fmt.Fprintf(w, "  %s at %d: %.0f of %d renewals failed in a sweep (median)\n", r.Impl, r.Locks, r.FailedRenewals, r.Locks)
		}
	}
}
