// Command hitratio measures the evicting map's hit ratios: shmarena's evicting
// Map against an exact LRU and an S3-FIFO reference simulator on Zipf,
// one-hit-wonder and scan traces, and prints the tables of results.md's
// "Hit ratio" section to standard output (progress goes to
// standard error). About five minutes; -short takes a few seconds;
// -whatif simulates a policy change (15/16 of the slots live) on the
// map's model instead (no Map runs). -bytes measures the hit ratio by
// bytes instead: values of sizes drawn from a bimodal and a log-normal
// mix, every cache given a budget in bytes (exact LRU and S3-FIFO by
// bytes, ristretto v2, otter v2, the map WithBytes); a few minutes, or
// seconds with -short.
//
//	go run ./cmd/hitratio > /tmp/hitratio.md
//	go run ./cmd/hitratio -bytes > /tmp/hitratio-bytes.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shmarena/shmarena/bench/sim"
)

func main() {
	short := flag.Bool("short", false, "small traces (20,000 keys, 200,000 requests), as CI runs")
	bytes := flag.Bool("bytes", false, "instead, the hit ratio by bytes: sized values under a byte budget")
	whatif := flag.Bool("whatif", false, "instead, simulate a change to the map's policy (15/16 live) on its model")
	flag.Parse()
	specs, sizes := sim.FullSpecs(), sim.FullSizes()
	if *short {
		specs, sizes = sim.ShortSpecs(), sim.ShortSizes()
	}
	if *bytes {
		specs, shares := sim.SizedSpecs(), sim.SizedShares()
		if *short {
			specs, shares = sim.ShortSpecs(), sim.ShortSizedShares()
		}
		rows, err := sim.MeasureSized(specs, sim.Mixes(), shares, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hitratio:", err)
			os.Exit(1)
		}
		fmt.Print(sim.SizedMarkdown(rows))
		return
	}
	if *whatif {
		ws, err := sim.MeasureWhatIf(specs, sizes, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hitratio:", err)
			os.Exit(1)
		}
		fmt.Print(sim.WhatIfMarkdown(ws))
		return
	}
	rows, err := sim.Measure(specs, sizes, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hitratio:", err)
		os.Exit(1)
	}
	fmt.Print(sim.Markdown(rows))
}
