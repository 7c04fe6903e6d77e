package sim

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
)

// FullSpecs are the hit-ratio benchmark's traces: 1,000,000 keys, 5,000,000 requests,
// the first 20% warm-up.
func FullSpecs() []Spec {
	base := Spec{Keys: 1_000_000, Requests: 5_000_000, WarmupFrac: 0.2}
	return specs(base)
}

// FullSizes are the cache sizes of the full run: 0.1%, 1% and 10% of the
// keys.
func FullSizes() []int { return []int{1_000, 10_000, 100_000} }

// ShortSpecs are small versions of FullSpecs for CI: 20,000 keys,
// 200,000 requests.
func ShortSpecs() []Spec {
	base := Spec{Keys: 20_000, Requests: 200_000, WarmupFrac: 0.2}
	s := specs(base)
	for i := range s {
		s[i].ScanEvery, s[i].ScanLen = s[i].ScanEvery/25, s[i].ScanLen/25
	}
	return s
}

// ShortSizes are the cache sizes of the short run: 1% and 10% of its
// keys.
func ShortSizes() []int { return []int{200, 2_000} }

func specs(base Spec) []Spec {
	z10, z08, ohw, scan := base, base, base, base
	z10.Name, z10.Kind, z10.Alpha, z10.Seed = "Zipf 1.0", Zipf, 1.0, 1
	z08.Name, z08.Kind, z08.Alpha, z08.Seed = "Zipf 0.8", Zipf, 0.8, 2
	ohw.Name, ohw.Kind, ohw.Alpha, ohw.OneHitFrac, ohw.Seed = "Zipf 1.0 + 30% one-hit wonders", OneHit, 1.0, 0.3, 3
	scan.Name, scan.Kind, scan.Alpha, scan.ScanEvery, scan.ScanLen, scan.Seed = "Zipf 1.0 + scans", Scan, 1.0, 200_000, 40_000, 4
	return []Spec{z10, z08, ohw, scan}
}

// Row is one trace at one cache size C: every cache's hit ratio.
type Row struct {
	Trace string
	Keys  int
	C     int
	LRU   float64 // exact LRU of C entries
	S3    float64 // S3-FIFO reference of C entries (libCacheSim defaults)
	Map   float64 // shmarena Map WithSlots(C)
	Map87 float64 // shmarena Map WithSlots(C*8/7): holds about C live entries
	// The S3-FIFO reference changed one step at a time towards what the
	// map does, to attribute the gap between them.
	Thr1  float64 // ... moving an entry read once to main
	Cap78 float64 // ... and holding 7/8 of C
	Segs  float64 // ... and split into the map's segments, a ghost FIFO in each
	Model float64 // ... and the map's fingerprint ghost for the FIFO: the map's model
	// NoGhost is the model without a ghost: the map before it had one.
	NoGhost  float64
	Segments int // the map's segments at WithSlots(C)
	Stats    shmarena.MapStats
}

// Measure runs every spec at every size and returns the rows, logging
// progress to log (which may be nil).
func Measure(specs []Spec, sizes []int, log io.Writer) ([]Row, error) {
	if log == nil {
		log = io.Discard
	}
	var rows []Row
	for _, sp := range specs {
		start := time.Now()
		tr, err := Generate(sp)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "%s: trace of %d requests in %v\n", sp.Name, len(tr.Keys), time.Since(start).Round(time.Millisecond))
		for _, c := range sizes {
			start := time.Now()
			row := Row{Trace: sp.Name, Keys: sp.Keys, C: c, Segments: Segments(c)}
			segs := MapModel(c, false)
			segs.NoGhost = false // libCacheSim's ghost FIFO in each segment
			sims := []struct {
				dst *float64
				c   Cache
			}{
				{&row.LRU, NewLRU(c)},
				{&row.S3, NewS3FIFO(S3Config{Capacity: c})},
				{&row.Thr1, NewS3FIFO(S3Config{Capacity: c, Threshold: 1})},
				{&row.Cap78, NewS3FIFO(S3Config{Capacity: MapCapacity(c), Threshold: 1})},
				{&row.Segs, NewS3FIFO(segs)},
				{&row.Model, NewS3FIFO(MapModel(c, true))},
				{&row.NoGhost, NewS3FIFO(MapModel(c, false))},
			}
			for _, s := range sims {
				r, err := Run(tr, s.c)
				if err != nil {
					return nil, err
				}
				*s.dst = r.Ratio()
			}
			r, st, err := RunMap(tr, c)
			if err != nil {
				return nil, fmt.Errorf("%s, map of %d slots: %w", sp.Name, c, err)
			}
			row.Map, row.Stats = r.Ratio(), st
			if r, _, err = RunMap(tr, c*8/7); err != nil {
				return nil, fmt.Errorf("%s, map of %d slots: %w", sp.Name, c*8/7, err)
			}
			row.Map87 = r.Ratio()
			rows = append(rows, row)
			fmt.Fprintf(log, "  C=%d: LRU %.4f S3-FIFO %.4f map %.4f map(8/7) %.4f model %.4f model without ghost %.4f (%v)\n",
				c, row.LRU, row.S3, row.Map, row.Map87, row.Model, row.NoGhost, time.Since(start).Round(time.Millisecond))
		}
	}
	return rows, nil
}

// Target tolerances of the hit-ratio benchmark: the map beats exact LRU, and is within
// this many points of hit ratio of the S3-FIFO reference.
const S3Tolerance = 0.02

// pts formats a difference of hit ratios in percentage points.
func pts(d float64) string { return fmt.Sprintf("%+.1f", 100*d) }

func pct(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) }

// Markdown renders rows as the tables of results.md's hit-ratio section.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| trace | C (of keys) | exact LRU | S3-FIFO ref | shmarena map | map − LRU | map − S3-FIFO | targets |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d (%s) | %s | %s | %s `WithSlots(%d)` | %s | %s | %s |\n",
			r.Trace, r.C, share(r.C, r.Keys), pct(r.LRU), pct(r.S3), pct(r.Map), r.C,
			pts(r.Map-r.LRU), pts(r.Map-r.S3), verdict(r.Map, r))
		fmt.Fprintf(&b, "| ↳ *secondary: map holding C live* | | | | %s `WithSlots(%d)` | %s | %s | %s |\n",
			pct(r.Map87), r.C*8/7, pts(r.Map87-r.LRU), pts(r.Map87-r.S3), verdict(r.Map87, r))
	}
	b.WriteString("\nWhere the gap to S3-FIFO comes from: the reference changed one step at a time towards\n")
	b.WriteString("the map (each column keeps the changes to its left), then the map itself; last, the\n")
	b.WriteString("model without a ghost, and what the ghost adds to it:\n\n")
	b.WriteString("| trace | C | S3-FIFO ref | to main after 1 read | + holds 7/8·C | + split in the map's segments | + fingerprint ghost (model) | map | map − model | model, no ghost | ghost adds |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s (%d) | %s | %s | %s | %s | %s |\n",
			r.Trace, r.C, pct(r.S3), pct(r.Thr1), pct(r.Cap78), pct(r.Segs), r.Segments, pct(r.Model),
			pct(r.Map), pts(r.Map-r.Model), pct(r.NoGhost), pts(r.Model-r.NoGhost))
	}
	return b.String()
}

func share(c, keys int) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", 100*float64(c)/float64(keys)), "0"), ".") + "%"
}

func verdict(m float64, r Row) string {
	var out []string
	if m > r.LRU {
		out = append(out, "beats LRU")
	} else {
		out = append(out, "**LRU not beaten**")
	}
	if m >= r.S3-S3Tolerance {
		out = append(out, "within 2 pts")
	} else {
		out = append(out, "**not within 2 pts**")
	}
	return strings.Join(out, ", ")
}

// WhatIf is one trace at one size C under a change to the map's policy
// that could still be made, simulated on the map's model
// (MapModel, ghost included).
type WhatIf struct {
	Trace     string
	C         int
	S3, Model float64
	Live1516  float64 // the model holding 15/16 of each segment's slots
}

// MeasureWhatIf simulates the what-if variants of every spec at every
// size, logging progress to log (which may be nil).
func MeasureWhatIf(specs []Spec, sizes []int, log io.Writer) ([]WhatIf, error) {
	if log == nil {
		log = io.Discard
	}
	var out []WhatIf
	for _, sp := range specs {
		tr, err := Generate(sp)
		if err != nil {
			return nil, err
		}
		for _, c := range sizes {
			w := WhatIf{Trace: sp.Name, C: c}
			model := MapModel(c, true)
			l16 := model
			l16.Live = func(n int) int { return max(1, n-n/16) }
			for _, s := range []struct {
				dst *float64
				cfg S3Config
			}{{&w.S3, S3Config{Capacity: c}}, {&w.Model, model}, {&w.Live1516, l16}} {
				r, err := Run(tr, NewS3FIFO(s.cfg))
				if err != nil {
					return nil, err
				}
				*s.dst = r.Ratio()
			}
			fmt.Fprintf(log, "  what-if %s C=%d: model %.4f 15/16 %.4f\n", sp.Name, c, w.Model, w.Live1516)
			out = append(out, w)
		}
	}
	return out, nil
}

// WhatIfMarkdown renders what-if rows as a table.
func WhatIfMarkdown(ws []WhatIf) string {
	var b strings.Builder
	b.WriteString("| trace | C | S3-FIFO ref | map model (as shipped) | holds 15/16 |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	for _, w := range ws {
		fmt.Fprintf(&b, "| %s | %d | %s | %s (%s) | %s (%s) |\n", w.Trace, w.C, pct(w.S3),
			pct(w.Model), pts(w.Model-w.S3), pct(w.Live1516), pts(w.Live1516-w.S3))
	}
	return b.String()
}
