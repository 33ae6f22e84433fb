package loadgen

import (
	"context"
	"fmt"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
)

// askWorkersTimeout bounds the admin calls behind one progress line.
const askWorkersTimeout = 5 * time.Second

// workerView is what the scheduler says about its workers for the
// bench's actions, to tell a user why nothing has completed yet.
type workerView struct {
	// connected counts the registered workers (not those restored from
	// the scheduler's store that have not reconnected).
	connected int
	// able counts the connected workers that can run the actions and
	// take new work.
	able int
	// stopped counts the connected workers that could run the actions
	// but take no new work (drained, paused, terminating).
	stopped int
	// running and slots are the actions the able workers hold and how
	// many they can hold.
	running, slots int
	// noQueue: no provision queue accepts the actions' platform
	// properties (or they are invalid), so no worker ever will.
	noQueue bool
}

// askWorkers asks the admin service of conn which workers could run
// actions with platform and how busy they are.
func askWorkers(ctx context.Context, conn grpc.ClientConnInterface, platform *repb.Platform) (workerView, error) {
	ctx, cancel := context.WithTimeout(ctx, askWorkersTimeout)
	defer cancel()
	admin := adminpb.NewAdminClient(conn)
	list, err := admin.ListWorkers(ctx, &adminpb.ListWorkersRequest{})
	if err != nil {
		return workerView{}, err
	}
	req := &adminpb.ExplainPlatformRequest{}
	for _, p := range platform.GetProperties() {
		req.Properties = append(req.Properties, &adminpb.Property{Name: p.Name, Value: p.Value})
	}
	ex, err := admin.ExplainPlatform(ctx, req)
	if err != nil {
		return workerView{}, err
	}
	return viewWorkers(list, ex), nil
}

// viewWorkers combines the worker list with the platform explanation.
func viewWorkers(list *adminpb.ListWorkersResponse, ex *adminpb.ExplainPlatformResponse) workerView {
	v := workerView{noQueue: ex.Invalid != ""}
	chosen := false
	for _, q := range ex.Queues {
		chosen = chosen || q.Chosen
	}
	if !chosen {
		v.noQueue = true
	}
	canRun := map[string]bool{}
	for _, w := range ex.Workers {
		canRun[w.Worker] = len(w.Reasons) == 0
	}
	for _, w := range list.Workers {
		switch {
		case w.State == "reconnecting":
			continue
		case !canRun[w.WorkerId]:
		case w.State == "active":
			v.able++
			v.running += len(w.Leases)
			v.slots += int(w.Slots)
		default:
			v.stopped++
		}
		v.connected++
	}
	return v
}

// stalledNote is the remark on a progress line while no action has
// completed: it asks whether workers are connected only when the
// scheduler says none can take the work, and otherwise says what they do.
// err is askWorkers' error.
func stalledNote(v workerView, err error) string {
	const prefix = "nothing has completed yet"
	switch {
	case err != nil:
		return fmt.Sprintf("%s; the server did not say which workers can run these actions (%s)", prefix, status.Code(err))
	case v.noQueue:
		return prefix + ": no provision queue accepts these actions' platform properties; `gantry queues explain --property ...` says why"
	case v.connected == 0:
		return prefix + ": no workers are connected to the server; start one with `gantry worker` (or use --noop-workers)"
	case v.able == 0 && v.stopped > 0:
		return fmt.Sprintf("%s: the %d workers that could run these actions are drained, paused or terminating (`gantry workers list`)", prefix, v.stopped)
	case v.able == 0:
		return fmt.Sprintf("%s: none of the %d connected workers can run these actions; `gantry queues explain --property ...` says why", prefix, v.connected)
	case v.running == 0:
		return fmt.Sprintf("%s; %d of %d connected workers can run these actions and hold none yet", prefix, v.able, v.connected)
	}
	return fmt.Sprintf("%s; %d of %d connected workers can run these actions and are busy (%d actions on %d slots)", prefix, v.able, v.connected, v.running, v.slots)
}
