package auth

import (
	"strings"
)

// instanceFrom says where a method's instance name comes from.
type instanceFrom uint8

const (
	// fromField: the request's instance_name field.
	fromField instanceFrom = iota
	// fromReadResource: a ByteStream read resource name.
	fromReadResource
	// fromWriteResource: a ByteStream upload resource name.
	fromWriteResource
	// fromOperation: the instance of the operation the request names.
	fromOperation
	// fromFieldOrGlobal: instance_name when the request has one,
	// otherwise the call concerns every instance.
	fromFieldOrGlobal
	// fromGlobal: the call concerns every instance.
	fromGlobal
	// fromAny: the permission on any instance will do (the worker
	// protocol after Register).
	fromAny
	// fromWorkerInstances: every instance a registering worker serves.
	fromWorkerInstances
	// open: no authentication or authorization (health, reflection).
	open
)

type method struct {
	need Perm
	from instanceFrom
}

const (
	reapi       = "/build.bazel.remote.execution.v2."
	byteStream  = "/google.bytestream.ByteStream/"
	operations  = "/google.longrunning.Operations/"
	workersSvc  = "/gantry.worker.v1.Workers/"
	adminPrefix = "/gantry.admin.v1.Admin/"
	asset       = "/build.bazel.remote.asset.v1."
)

// methods maps every gRPC method Gantry serves to the permission it needs.
// A method that is not here (and not under a prefix in lookupMethod) is
// denied. TestEveryMethodIsMapped checks this table against the server.
var methods = map[string]method{
	reapi + "Capabilities/GetCapabilities": {PermAll, fromField},

	reapi + "ContentAddressableStorage/FindMissingBlobs":     {PermCASRead | PermCASWrite, fromField},
	reapi + "ContentAddressableStorage/BatchReadBlobs":       {PermCASRead, fromField},
	reapi + "ContentAddressableStorage/GetTree":              {PermCASRead, fromField},
	reapi + "ContentAddressableStorage/SplitBlob":            {PermCASRead, fromField},
	reapi + "ContentAddressableStorage/GetChunkMapping":      {PermCASRead, fromField},
	reapi + "ContentAddressableStorage/BatchUpdateBlobs":     {PermCASWrite, fromField},
	reapi + "ContentAddressableStorage/SpliceBlob":           {PermCASWrite, fromField},
	reapi + "ContentAddressableStorage/RegisterChunkMapping": {PermCASWrite, fromField},

	reapi + "ActionCache/GetActionResult":    {PermACRead, fromField},
	reapi + "ActionCache/UpdateActionResult": {PermACWrite, fromField},

	reapi + "Execution/Execute":       {PermExecute, fromField},
	reapi + "Execution/WaitExecution": {PermExecute, fromOperation},

	byteStream + "Read":             {PermCASRead, fromReadResource},
	byteStream + "Write":            {PermCASWrite, fromWriteResource},
	byteStream + "QueryWriteStatus": {PermCASWrite, fromWriteResource},

	operations + "GetOperation":    {PermExecute, fromOperation},
	operations + "WaitOperation":   {PermExecute, fromOperation},
	operations + "CancelOperation": {PermExecute, fromOperation},
	operations + "DeleteOperation": {PermExecute, fromOperation},
	operations + "ListOperations":  {PermAdmin, fromGlobal},

	// An operator may kill the operations of the instances they
	// administer, as on the status page; the other admin methods are
	// mapped by prefix (lookupMethod).
	adminPrefix + "KillOperation": {PermAdmin, fromOperation},
	// Users may ask about their own instance's operations and platforms
	// (the admin permission there will do too).
	adminPrefix + "GetOperationDetails":  {PermAdmin | PermExecute, fromOperation},
	adminPrefix + "ListOperationDetails": {PermAdmin | PermExecute, fromField},
	adminPrefix + "ExplainPlatform":      {PermAdmin | PermExecute, fromField},

	logStreamCreate: {PermExecute, fromField},

	asset + "Fetch/FetchBlob":      {PermAssetFetch, fromField},
	asset + "Fetch/FetchDirectory": {PermAssetFetch, fromField},
	asset + "Push/PushBlob":        {PermAssetPush, fromField},
	asset + "Push/PushDirectory":   {PermAssetPush, fromField},

	workersSvc + "Register":  {PermWorker, fromWorkerInstances},
	workersSvc + "Poll":      {PermWorker, fromAny},
	workersSvc + "Heartbeat": {PermWorker, fromAny},
	workersSvc + "Complete":  {PermWorker, fromAny},
}

// lookupMethod returns what fullMethod needs; ok is false for a method
// nobody may call.
func lookupMethod(fullMethod string) (m method, ok bool) {
	if m, ok := methods[fullMethod]; ok {
		return m, true
	}
	switch {
	case strings.HasPrefix(fullMethod, adminPrefix):
		// Every admin method, present and future: instance_name scopes
		// it when the request has one.
		return method{PermAdmin, fromFieldOrGlobal}, true
	case strings.HasPrefix(fullMethod, workersSvc):
		// New worker-protocol methods need the worker permission.
		return method{PermWorker, fromAny}, true
	case strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1.ServerReflection/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1alpha.ServerReflection/"):
		return method{0, open}, true
	}
	return method{}, false
}

// Mapped reports whether fullMethod has a permission mapping (or is one
// of the open health and reflection methods).
func Mapped(fullMethod string) bool {
	_, ok := lookupMethod(fullMethod)
	return ok
}
