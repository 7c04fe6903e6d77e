package sim

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
)

// SizedSpecs are the traces of the hit ratio by bytes: the entry
// benchmark's shapes over 200,000 keys, 2,000,000 requests (the first 20%
// warm-up), scans of 16,000 keys every 80,000 requests (the same 20% of
// the requests as FullSpecs'). Smaller than FullSpecs because the map
// stores real values: the 10% budget of the bimodal mix is 87 MB.
func SizedSpecs() []Spec {
	base := Spec{Keys: 200_000, Requests: 2_000_000, WarmupFrac: 0.2}
	s := specs(base)
	for i := range s {
		s[i].ScanEvery, s[i].ScanLen = s[i].ScanEvery*2/5, s[i].ScanLen*2/5
	}
	return s
}

// SizedShares are the budgets of the full run, as shares of the bytes of
// the trace's key space (SizedTrace.Bytes): 0.1%, 1% and 10%.
func SizedShares() []float64 { return []float64{0.001, 0.01, 0.1} }

// ShortSizedShares are the budgets of the short run: 1% and 10%.
func ShortSizedShares() []float64 { return []float64{0.01, 0.1} }

// Mixes are the value-size mixes of the hit ratio by bytes.
func Mixes() []SizeMix { return []SizeMix{Bimodal, LogNormal} }

// SizedRow is one trace with one size mix at one budget: every cache's
// hit ratio.
type SizedRow struct {
	Trace, Mix string
	Share      float64 // the budget's share of the key space's bytes
	Budget     int64   // bytes
	Slots      int     // the map's WithSlots
	LRU        float64 // exact LRU by bytes
	S3         float64 // S3-FIFO by bytes (libCacheSim's)
	Ristretto  float64
	Otter      float64
	Clock      float64 // ClockBytes: the model of the map's eviction by bytes
	Map        float64 // shmarena Map WithBytes(Budget)
	MapFile    int64   // MapBytes of the map's options: slots and value space
	Stats      shmarena.MapStats
}

// MeasureSized runs every spec with every mix at every share of its
// bytes, logging progress to log (which may be nil).
func MeasureSized(specs []Spec, mixes []SizeMix, shares []float64, log io.Writer) ([]SizedRow, error) {
	if log == nil {
		log = io.Discard
	}
	var rows []SizedRow
	for _, sp := range specs {
		tr, err := Generate(sp)
		if err != nil {
			return nil, err
		}
		for mi, x := range mixes {
			st := Sized(tr, x, sp.Seed*100+uint64(mi))
			for _, share := range shares {
				start := time.Now()
				row, err := measureSized(st, share)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, %.1f%%: %w", sp.Name, x.Name, 100*share, err)
				}
				rows = append(rows, row)
				fmt.Fprintf(log, "%s, %s, %s (%d B): LRU %.4f S3-FIFO %.4f ristretto %.4f otter %.4f clock model %.4f map %.4f (%d of %d slots used, %d of %d bytes, %d dead; %v)\n",
					row.Trace, row.Mix, pctOf(share), row.Budget, row.LRU, row.S3, row.Ristretto, row.Otter, row.Clock, row.Map,
					row.Stats.Used, row.Slots, row.Stats.BytesUsed, row.Stats.BytesCapacity, row.Stats.BytesDead,
					time.Since(start).Round(time.Millisecond))
			}
		}
	}
	return rows, nil
}

// MeanEntry returns the mean bytes of the entries of t's key space.
func (t *SizedTrace) MeanEntry() int { return int(t.Bytes / int64(max(1, t.Spec.Keys))) }

// SizedSlots is the map's slot count for a budget: 4x the entries the
// budget holds at the mix's mean entry, so that slots never bind (the
// map's segments hold 7/8 of their slots; MeasureSized logs what was
// used).
func SizedSlots(budget int64, meanEntry int) int {
	return int(max(1024, 4*budget/int64(max(1, meanEntry))))
}

func measureSized(st *SizedTrace, share float64) (SizedRow, error) {
	budget := int64(float64(st.Bytes) * share)
	row := SizedRow{Trace: st.Spec.Name, Mix: st.Mix, Share: share, Budget: budget,
		Slots: SizedSlots(budget, st.MeanEntry())}
	r, err := RunSized(st, NewLRUBytes(budget))
	if err != nil {
		return row, err
	}
	row.LRU = r.Ratio()
	if r, err = RunSized(st, NewS3FIFOBytes(budget)); err != nil {
		return row, err
	}
	row.S3 = r.Ratio()
	if r, err = RunSized(st, NewClockBytes(budget)); err != nil {
		return row, err
	}
	row.Clock = r.Ratio()
	rc, err := NewRistretto(budget, st.MeanEntry())
	if err != nil {
		return row, err
	}
	r, err = RunSized(st, rc)
	rc.Close()
	if err != nil {
		return row, err
	}
	row.Ristretto = r.Ratio()
	oc, err := NewOtter(budget)
	if err != nil {
		return row, err
	}
	r, err = RunSized(st, oc)
	oc.Close()
	if err != nil {
		return row, err
	}
	row.Otter = r.Ratio()
	if row.MapFile, err = shmarena.MapBytes(SizedMapOptions(row.Slots, budget)...); err != nil {
		return row, err
	}
	r, row.Stats, err = RunSizedMap(st, row.Slots, budget)
	if err != nil {
		return row, fmt.Errorf("map of %d slots, %d bytes: %w", row.Slots, budget, err)
	}
	row.Map = r.Ratio()
	return row, nil
}

// RunSizedMap plays t against a fresh SizedMapCache and returns its
// result with the map's final stats.
func RunSizedMap(t *SizedTrace, slots int, bytes int64) (Result, shmarena.MapStats, error) {
	c, err := NewSizedMapCache(slots, bytes)
	if err != nil {
		return Result{}, shmarena.MapStats{}, err
	}
	defer c.Close()
	r, err := RunSized(t, c)
	return r, c.Map.Stats(), err
}

func pctOf(share float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", 100*share), "0"), ".") + "%"
}

// mib formats bytes in MiB (KiB below 1 MiB).
func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.0f KiB", float64(b)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// SizedMarkdown renders rows as the table of results.md's hit ratio by
// bytes.
func SizedMarkdown(rows []SizedRow) string {
	var b strings.Builder
	b.WriteString("| trace | sizes | budget (of the key space's bytes) | exact LRU | S3-FIFO ref | ristretto v2 | otter v2 | shmarena map | map − LRU | map − S3-FIFO | targets | CLOCK-by-bytes model | map's file / budget |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n",
			r.Trace, r.Mix, mib(r.Budget), pctOf(r.Share), pct(r.LRU), pct(r.S3), pct(r.Ristretto), pct(r.Otter), pct(r.Map),
			pts(r.Map-r.LRU), pts(r.Map-r.S3), verdict(r.Map, Row{LRU: r.LRU, S3: r.S3}), pct(r.Clock),
			float64(r.MapFile)/float64(r.Budget))
	}
	return b.String()
}
