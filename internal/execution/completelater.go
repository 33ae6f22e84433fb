package execution

import (
	"context"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// completeStoredLater is Complete with store_completions_later: the
// outcomes (reqs, the request's own first when single) are accepted
// without waiting for their commit, and the reply lists the worker's
// earlier ones stored since. A request with no outcome asks only for that
// news, and waits for the commit of what the worker has waiting: a worker
// that keeps its results until they are stored learns of it in one call
// per commit, not by polling.
func (s *WorkerService) completeStoredLater(ctx context.Context, req *workerpb.CompleteRequest, reqs []*workerpb.CompleteRequest, name func(int) string, single bool) (*workerpb.CompleteResponse, error) {
	resp := &workerpb.CompleteResponse{StoredLater: true}
	if len(reqs) == 0 {
		if ticket, ok := s.acks.last(req.WorkerId); ok {
			s.sched.WaitStored(ctx, ticket)
		}
		resp.StoredCompletions = s.acks.take(req.WorkerId, s.sched.Stored)
		return resp, nil
	}
	accepted, err := s.completeLater(ctx, req.WorkerId, reqs, name)
	if err != nil {
		return nil, err
	}
	s.sched.StartStoring()
	if single {
		resp.Accepted, accepted = accepted[0], accepted[1:]
	}
	if len(req.Completions) > 0 {
		resp.CompletionsAccepted = accepted
	}
	resp.StoredCompletions = s.acks.take(req.WorkerId, s.sched.Stored)
	return resp, nil
}
