// Package priority is Slurm's multifactor job priority: age, fairshare,
// job size, partition tier, QOS and nice, each normalised to [0,1] and
// weighted. Pure and deterministic.
package priority

import (
	"math"
	"time"
)

// Weights multiply each normalised factor; the total is their sum.
type Weights struct {
	Age, Fairshare, JobSize, Partition, QOS, Nice float64
}

// Zero reports whether every weight is zero (multifactor off).
func (w Weights) Zero() bool { return w == Weights{} }

// Config is the multifactor policy.
type Config struct {
	Weights Weights
	// MaxAge caps the age factor: a job this old has age factor 1.
	// 0 means 7 days (Slurm's PriorityMaxAge default).
	MaxAge time.Duration
	// FavorSmall inverts the job-size factor (small jobs first).
	FavorSmall bool
	// MaxNice is the |nice| that maps to factor 0 or 1; 0 means 10000.
	MaxNice int
}

// Input is what one job contributes.
type Input struct {
	Submit time.Time
	// Fairshare is the Fair Tree factor in [0,1].
	Fairshare float64
	// GPUs the job asks for in all; ClusterGPUs the cluster's total.
	GPUs, ClusterGPUs float64
	// Tier is the partition's priority tier; MaxTier the highest.
	Tier, MaxTier int
	// QOS is the QOS priority; MaxQOS the highest QOS priority.
	QOS, MaxQOS int64
	Nice        int
}

// Factors are the normalised factors, each in [0,1].
type Factors struct {
	Age, Fairshare, JobSize, Partition, QOS, Nice float64
}

// Result is a job's total priority and its breakdown (gpuq prio).
type Result struct {
	Total   int64
	Factors Factors
	// Weighted are the factors times their weights; Total is their rounded sum.
	Weighted Factors
}

// Compute returns in's priority at now.
func Compute(in Input, now time.Time, cfg Config) Result {
	maxAge := cfg.MaxAge
	if maxAge <= 0 {
		maxAge = 7 * 24 * time.Hour
	}
	maxNice := cfg.MaxNice
	if maxNice <= 0 {
		maxNice = 10000
	}
	var f Factors
	f.Age = clamp(float64(now.Sub(in.Submit)) / float64(maxAge))
	f.Fairshare = clamp(in.Fairshare)
	if in.ClusterGPUs > 0 {
		f.JobSize = clamp(in.GPUs / in.ClusterGPUs)
	}
	if cfg.FavorSmall {
		f.JobSize = 1 - f.JobSize
	}
	if in.MaxTier > 0 {
		f.Partition = clamp(float64(in.Tier) / float64(in.MaxTier))
	}
	if in.MaxQOS > 0 {
		f.QOS = clamp(float64(in.QOS) / float64(in.MaxQOS))
	}
	f.Nice = clamp(0.5 - float64(in.Nice)/float64(2*maxNice))
	w := cfg.Weights
	wf := Factors{
		Age: w.Age * f.Age, Fairshare: w.Fairshare * f.Fairshare, JobSize: w.JobSize * f.JobSize,
		Partition: w.Partition * f.Partition, QOS: w.QOS * f.QOS, Nice: w.Nice * f.Nice,
	}
	total := wf.Age + wf.Fairshare + wf.JobSize + wf.Partition + wf.QOS + wf.Nice
	return Result{Total: int64(math.Round(total)), Factors: f, Weighted: wf}
}

func clamp(x float64) float64 {
	switch {
	case math.IsNaN(x) || x < 0:
		return 0
	case x > 1:
		return 1
	}
	return x
}
