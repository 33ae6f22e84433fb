package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// floodTime is how long each flood action runs (they are cancelled at
// the end of a test).
const floodTime = 60 * time.Second

// startFlood runs n long actions of instance "flood" in the background;
// the returned function cancels them and waits for their calls to end.
func startFlood(ctx context.Context, execute func(context.Context, string, *repb.Command) (*repb.ExecuteResponse, error), n int) (stop func()) {
	floodCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execute(floodCtx, "flood", shCmd(fmt.Sprintf("sleep %d; echo flood %d", int(floodTime.Seconds()), i)))
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// quotaFarm is a farm whose worker (two cores) is in cohort x86, with a
// pre-emption delay of 1 s and min_quota 1 for instance "small", and a
// function that runs a command on an instance. mods change the
// configuration further.
func quotaFarm(t *testing.T, mods ...func(*config.Config)) (*farm, adminpb.AdminClient, func(context.Context, string, *repb.Command) (*repb.ExecuteResponse, error)) {
	f := startFarm(t, func(c *config.Config) {
		c.Scheduler.Labels = []config.LabelConfig{{Name: "linux", Properties: map[string]string{"OSFamily": "linux"}}}
		c.Scheduler.Cohorts = []config.CohortConfig{{Name: "x86", Labels: []string{"linux"}}}
		c.Scheduler.PreemptionDelay = config.Duration(time.Second)
		for _, m := range mods {
			m(c)
		}
	})
	admin := adminpb.NewAdminClient(f.conn)
	if _, err := admin.PutQuota(context.Background(), &adminpb.PutQuotaRequest{InstanceName: "small", Cohort: "x86", MinQuota: 1}); err != nil {
		t.Fatal(err)
	}
	execute := func(ctx context.Context, instance string, cmd *repb.Command) (*repb.ExecuteResponse, error) {
		a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true}
		resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: f.put(a).Proto()})
		return resp, err
	}
	return f, admin, execute
}

// A flood of long actions from one instance holds both slots of the
// cohort; an instance with min_quota 1 gets a slot by pre-emption and its
// short action finishes long before the flood would have let it.
func TestMinQuotaPreemptsFlood(t *testing.T) {
	f, admin, execute := quotaFarm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer startFlood(ctx, execute, 4)()
	// Wait until the flood holds both slots.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"})
		if err != nil {
			t.Fatal(err)
		}
		// The worker holds every flood action: two run, the others wait
		// in its pipeline for a core.
		if st.Usage == 4 {
			break
		}
		if time.Since(deadline) > 0 {
			t.Fatalf("the flood never filled the cohort: %+v; workers: %+v", st, f.srv.Scheduler().Cohorts())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	resp, err := execute(ctx, "small", shCmd("echo quick > out", "out"))
	took := time.Since(start)
	if err != nil || client.CheckResponse(resp) != nil {
		t.Fatalf("small action: %v %v", err, client.CheckResponse(resp))
	}
	if got := f.read(resp.Result.OutputFiles[0].Digest); got != "quick\n" {
		t.Errorf("small output %q", got)
	}
	t.Logf("the small action finished in %s while the flood's actions take %s each", took, floodTime)
	if took > floodTime/4 {
		t.Errorf("small action took %s; a min_quota of 1 should get it a slot within the pre-emption delay", took)
	}
	// One running flood action and the ones waiting behind it in the
	// worker's pipeline were taken back.
	if n := f.srv.Scheduler().Stats().Preemptions; n < 1 || n > 3 {
		t.Errorf("%d pre-emptions, want 1 to 3", n)
	}
	// The pre-empted flood actions are back (not failed): all 4 are held
	// or queued again.
	var st *adminpb.QuotaStatus
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var err error
		if st, err = admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"}); err != nil {
			t.Fatal(err)
		}
		if st.Usage+st.Queued == 4 {
			break
		}
	}
	if st.Usage+st.Queued != 4 {
		t.Errorf("flood after the pre-emption: %d held, %d queued; want all 4 back (%s)", st.Usage, st.Queued, f.srv.Scheduler())
	}
}

// Two long flood actions hold both cores, leaving room in the worker's
// pipeline: the small instance's action is taken by the worker ahead of
// its cores and waits there, not in the queue. It is still below its min
// (nothing of it runs): after the delay a flood action on that worker is
// pre-empted and the small action runs.
func TestMinQuotaPreemptsForActionHeldByTheWorker(t *testing.T) {
	f, admin, execute := quotaFarm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer startFlood(ctx, execute, 2)()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"})
		if err != nil {
			t.Fatal(err)
		}
		if st.Usage == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flood never started: %+v", st)
		}
	}
	// Give the worker time to report both running (EXECUTING).
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	smallDone := make(chan error, 1)
	go func() {
		resp, err := execute(ctx, "small", shCmd("echo quick > out", "out"))
		if err == nil {
			err = client.CheckResponse(resp)
		}
		smallDone <- err
	}()
	// The worker holds the small action (its usage counts it) while the
	// flood still holds both cores.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "small", Cohort: "x86"})
		if err != nil {
			t.Fatal(err)
		}
		if st.Usage == 1 && f.srv.Scheduler().Stats().Preemptions == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never took the small action ahead of its cores: %+v (%d pre-emptions)", st, f.srv.Scheduler().Stats().Preemptions)
		}
	}
	if err := <-smallDone; err != nil {
		t.Fatalf("small action: %v", err)
	}
	took := time.Since(start)
	t.Logf("the small action finished in %s while the flood's actions take %s each", took, floodTime)
	if took > floodTime/4 {
		t.Errorf("small action took %s; held by the worker behind the flood, it should get a core by pre-emption within the delay", took)
	}
	if n := f.srv.Scheduler().Stats().Preemptions; n != 1 {
		t.Errorf("%d pre-emptions, want 1 (one flood action)", n)
	}
}
