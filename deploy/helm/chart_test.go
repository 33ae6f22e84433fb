// Package helm tests the chart under gantry/: helm lint, helm template with
// each value set under gantry/ci/ (and the defaults), and every rendered
// object decoded strictly into the Kubernetes API types of k8s.io/api, so
// that an unknown or misspelt field fails, with the cross references
// checked (selectors, ports, ConfigMap, PVC) and every node's gantry.yaml
// loaded with Gantry's own config loader.
package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gantry-build/gantry/deploy/internal/deploytest"
	"github.com/gantry-build/gantry/internal/config"
)

// kubeVersion is the Kubernetes version helm renders for (the chart needs
// 1.27 or later: gRPC probes).
const kubeVersion = "1.31.0"

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := deploytest.Tool(t, "helm", "go install helm.sh/helm/v3/cmd/helm@v3.22.0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// valueSets are the values files helm template renders: none (the
// defaults) and each of gantry/ci/*.yaml.
func valueSets(t *testing.T) []string {
	sets, err := filepath.Glob("gantry/ci/*.yaml")
	if err != nil || len(sets) == 0 {
		t.Fatalf("no value sets under gantry/ci: %v", err)
	}
	return append([]string{""}, sets...)
}

func TestHelmLint(t *testing.T) {
	for _, values := range valueSets(t) {
		args := []string{"lint", "--strict", "--kube-version", kubeVersion, "gantry"}
		if values != "" {
			args = append(args, "--values", values)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// A newcomer's `helm template` and `helm lint`, without --kube-version,
// render the chart with its defaults.
func TestHelmRendersWithoutKubeVersion(t *testing.T) {
	for _, args := range [][]string{{"template", "gantry", "gantry"}, {"lint", "gantry"}} {
		out, err := helm(t, args...)
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		} else if args[0] == "template" && !strings.Contains(out, "kind: Deployment") {
			t.Errorf("helm %s rendered no Deployment:\n%.2000s", strings.Join(args, " "), out)
		}
	}
}

// rendered is one value set's objects, by kind and name.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	daemonSets  map[string]*appsv1.DaemonSet
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	pvcs        map[string]*corev1.PersistentVolumeClaim
	pdbs        map[string]*policyv1.PodDisruptionBudget
	monitors    []map[string]any
	scalers     []map[string]any
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
}

func render(t *testing.T, values string, set ...string) (*rendered, error) {
	t.Helper()
	args := []string{"template", "ci", "gantry", "--namespace", "build", "--kube-version", kubeVersion}
	if values != "" {
		args = append(args, "--values", values)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, out)
	}
	r := &rendered{deployments: map[string]*appsv1.Deployment{}, daemonSets: map[string]*appsv1.DaemonSet{}, services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}, pvcs: map[string]*corev1.PersistentVolumeClaim{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}}
	for _, doc := range strings.Split(out, "\n---\n") {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: a rendered document is no YAML: %v\n%s", values, err, doc)
		}
		if head.Kind == "" {
			continue // only comments
		}
		for _, msg := range validation.IsDNS1123Subdomain(head.Metadata.Name) {
			t.Errorf("%s: %s %q: %s", values, head.Kind, head.Metadata.Name, msg)
		}
		// Strict: unknown and duplicate fields are errors.
		strict := func(into any) {
			t.Helper()
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Errorf("%s: %s %s does not match the Kubernetes API: %v\n%s", values, head.Kind, head.Metadata.Name, err, doc)
			}
		}
		key := head.APIVersion + " " + head.Kind
		switch key {
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			strict(o)
			r.deployments[o.Name] = o
		case "apps/v1 DaemonSet":
			o := &appsv1.DaemonSet{}
			strict(o)
			r.daemonSets[o.Name] = o
		case "v1 Service":
			o := &corev1.Service{}
			strict(o)
			r.services[o.Name] = o
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			strict(o)
			r.configMaps[o.Name] = o
		case "v1 PersistentVolumeClaim":
			o := &corev1.PersistentVolumeClaim{}
			strict(o)
			r.pvcs[o.Name] = o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			strict(o)
			r.pdbs[o.Name] = o
		case "monitoring.coreos.com/v1 ServiceMonitor":
			var o map[string]any
			strict(&o)
			r.monitors = append(r.monitors, o)
		case "keda.sh/v1alpha1 ScaledObject":
			var o map[string]any
			strict(&o)
			r.scalers = append(r.scalers, o)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			strict(o)
			r.hpas[o.Name] = o
		default:
			t.Errorf("%s: the chart renders %s, which this test does not check; add it", values, key)
		}
	}
	return r, nil
}

// pods are the rendered workloads' pod templates, by workload name.
func (r *rendered) pods() map[string]*corev1.PodTemplateSpec {
	pods := map[string]*corev1.PodTemplateSpec{}
	for n, d := range r.deployments {
		pods[n] = &d.Spec.Template
	}
	for n, d := range r.daemonSets {
		pods[n] = &d.Spec.Template
	}
	return pods
}

// checkPod checks what the API server would refuse or what would never
// start: containers without image, probe ports that are not declared,
// volumes naming missing ConfigMaps or claims, mounts of missing volumes.
func checkPod(t *testing.T, where string, r *rendered, pod *corev1.PodTemplateSpec) {
	t.Helper()
	spec := pod.Spec
	if len(spec.Containers) == 0 {
		t.Errorf("%s: no containers", where)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("%s: pods must run as the image's non-root user 65532", where)
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
		if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("%s: volume %s names ConfigMap %s, which the chart does not render", where, v.Name, v.ConfigMap.Name)
		}
		if v.PersistentVolumeClaim != nil && r.pvcs[v.PersistentVolumeClaim.ClaimName] == nil {
			t.Errorf("%s: volume %s names claim %s, which the chart does not render", where, v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, c := range spec.Containers {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			t.Errorf("%s: container name %q: %s", where, c.Name, msg)
		}
		if c.Image == "" || strings.HasSuffix(c.Image, ":") {
			t.Errorf("%s: container %s has no image tag: %q", where, c.Name, c.Image)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			for _, msg := range validation.IsValidPortName(p.Name) {
				t.Errorf("%s: port name %q: %s", where, p.Name, msg)
			}
			ports[p.Name] = p.ContainerPort
		}
		for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if probe == nil {
				continue
			}
			switch {
			case probe.HTTPGet != nil:
				if p := probe.HTTPGet.Port; p.StrVal != "" && ports[p.StrVal] == 0 {
					t.Errorf("%s: %s probe uses port %q, which %s does not declare", where, name, p.StrVal, c.Name)
				}
			case probe.GRPC != nil:
				found := false
				for _, port := range ports {
					found = found || port == probe.GRPC.Port
				}
				if !found {
					t.Errorf("%s: %s probe uses port %d, which %s does not declare", where, name, probe.GRPC.Port, c.Name)
				}
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: container %s mounts volume %s, which the pod does not have", where, c.Name, m.Name)
			}
		}
	}
}

// checkConfig loads one of the ConfigMap's files with Gantry's loader.
func checkConfig(t *testing.T, where, name, text, role string) config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Errorf("%s: %s does not load: %v\n%s", where, name, err, text)
		return cfg
	}
	if cfg.Role != role {
		t.Errorf("%s: %s has role %q; want %q", where, name, cfg.Role, role)
	}
	return cfg
}

func TestHelmTemplate(t *testing.T) {
	for _, values := range valueSets(t) {
		name := values
		if name == "" {
			name = "defaults"
		}
		t.Run(filepath.Base(name), func(t *testing.T) {
			r, err := render(t, values)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			pods := r.pods()
			for n, pod := range pods {
				checkPod(t, n, r, pod)
			}
			// Every selector selects its own pods.
			for n, d := range r.deployments {
				sel, err := metaSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("Deployment %s: selector %v does not match its pods' labels %v (%v)", n, d.Spec.Selector, d.Spec.Template.Labels, err)
				}
			}
			for n, d := range r.daemonSets {
				sel, err := metaSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("DaemonSet %s: selector does not match its pods' labels", n)
				}
			}
			// Every Service and PDB selects some pods, and a Service's
			// target ports are ports those pods declare.
			for n, s := range r.services {
				matched := false
				for _, pod := range pods {
					if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
						continue
					}
					matched = true
					for _, sp := range s.Spec.Ports {
						found := false
						for _, c := range pod.Spec.Containers {
							for _, cp := range c.Ports {
								found = found || cp.Name == sp.TargetPort.StrVal || cp.ContainerPort == sp.TargetPort.IntVal
							}
						}
						if !found {
							t.Errorf("Service %s: target port %v is not a port of the pods it selects", n, sp.TargetPort.String())
						}
					}
				}
				if !matched {
					t.Errorf("Service %s selects no pod of the chart", n)
				}
			}
			for n, pdb := range r.pdbs {
				sel, err := metaSelector(pdb.Spec.Selector)
				matched := false
				for _, pod := range pods {
					matched = matched || (err == nil && sel.Matches(labels.Set(pod.Labels)))
				}
				if !matched {
					t.Errorf("PodDisruptionBudget %s selects no pod of the chart", n)
				}
				if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
					t.Errorf("PodDisruptionBudget %s: set exactly one of minAvailable and maxUnavailable", n)
				}
			}
			for _, m := range r.monitors {
				spec, _ := m["spec"].(map[string]any)
				if spec == nil || spec["selector"] == nil || spec["endpoints"] == nil {
					t.Errorf("ServiceMonitor lacks spec.selector or spec.endpoints: %v", m)
				}
			}

			// The configuration of each role loads.
			cm := r.configMaps["ci-gantry"]
			if cm == nil {
				t.Fatalf("no ConfigMap ci-gantry")
			}
			front := checkConfig(t, name, "frontend.yaml", cm.Data["frontend.yaml"], config.RoleFrontend)
			sched := checkConfig(t, name, "scheduler.yaml", cm.Data["scheduler.yaml"], config.RoleScheduler)
			checkConfig(t, name, "worker.yaml", cm.Data["worker.yaml"], config.RoleAll)
			if front.Scheduler.Store.Backend != "postgres" || sched.Scheduler.Store.DSN != front.Scheduler.Store.DSN {
				t.Errorf("frontends and schedulers must share one PostgreSQL: %q, %q", front.Scheduler.Store.DSN, sched.Scheduler.Store.DSN)
			}
			if svc := r.services["ci-gantry"]; svc == nil || sched.Cluster.CAS != "ci-gantry:8980" {
				t.Errorf("the schedulers' cluster.cas %q must be the frontend Service's gRPC port", sched.Cluster.CAS)
			}
			if front.Worker.Enabled || sched.Worker.Enabled {
				t.Errorf("frontends and schedulers run no embedded worker in the chart")
			}
			if d := r.deployments["ci-gantry-scheduler"]; d == nil || !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), "--listen $(POD_IP):8980") {
				t.Errorf("the schedulers must listen on (and so advertise) their pod IP")
			}

			front1 := r.deployments["ci-gantry-frontend"]
			if front1 == nil {
				t.Fatalf("no frontend Deployment")
			}
			replicas := *front1.Spec.Replicas
			if front.Storage.CAS.Backend == "disk" && replicas != 1 {
				t.Errorf("a disk CAS with %d frontends", replicas)
			}
			if replicas > 1 && r.pdbs["ci-gantry-frontend"] == nil {
				t.Errorf("%d frontends without a PodDisruptionBudget", replicas)
			}
		})
	}
}

// TestHelmValueSets checks what each value set is there to show.
func TestHelmValueSets(t *testing.T) {
	r, err := render(t, "gantry/ci/s3-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.deployments["ci-gantry-frontend"]; d == nil || *d.Spec.Replicas != 3 {
		t.Fatalf("s3 values: want 3 frontends")
	}
	if len(r.monitors) != 1 {
		t.Errorf("s3 values: want a ServiceMonitor, got %d", len(r.monitors))
	}
	env := map[string]bool{}
	for _, e := range r.deployments["ci-gantry-frontend"].Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "gantry-s3"
	}
	if !env["AWS_ACCESS_KEY_ID"] || !env["AWS_SECRET_ACCESS_KEY"] {
		t.Errorf("s3 values: the frontends must read the S3 keys from the Secret gantry-s3: %v", env)
	}
	if cfg := r.configMaps["ci-gantry"].Data["frontend.yaml"]; !strings.Contains(cfg, "bucket: gantry-cas") || !strings.Contains(cfg, "prefix: farm-a/") {
		t.Errorf("s3 values: the bucket settings are not in the frontends' configuration:\n%s", cfg)
	}

	r, err = render(t, "gantry/ci/disk-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.daemonSets["ci-gantry-worker"] == nil || r.deployments["ci-gantry-worker"] != nil {
		t.Errorf("disk values: want the workers as a DaemonSet")
	}
	if r.pvcs["ci-gantry-frontend"] == nil {
		t.Errorf("disk values: want the frontend's CAS on a PersistentVolumeClaim")
	}

	r, err = render(t, "gantry/ci/minimal-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.pdbs) != 0 || len(r.daemonSets) != 0 || r.deployments["ci-gantry-worker"] != nil {
		t.Errorf("minimal values: want no workers and no PodDisruptionBudgets")
	}

	r, err = render(t, "gantry/ci/keda-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.scalers) != 1 || r.deployments["ci-gantry-worker"] == nil {
		t.Fatalf("keda values: want one ScaledObject for the worker Deployment, got %d", len(r.scalers))
	}
	so, _ := yaml.Marshal(r.scalers[0])
	for _, want := range []string{"name: ci-gantry-worker", "minReplicaCount: 2", "maxReplicaCount: 50", `query: sum(gantry_workers_needed{cohort="x86"})`, "stabilizationWindowSeconds: 600"} {
		if !strings.Contains(string(so), want) {
			t.Errorf("keda values: the ScaledObject lacks %q:\n%s", want, so)
		}
	}
	if d := r.deployments["ci-gantry-worker"]; d.Spec.Replicas != nil || len(r.hpas) != 0 {
		t.Errorf("keda values: the worker Deployment sets replicas (%v) the autoscaler owns, or an HPA is rendered too", d.Spec.Replicas)
	}

	// The HorizontalPodAutoscaler variant: on the External metric
	// gantry_workers_needed of the cohort, one replica per worker needed.
	r, err = render(t, "gantry/ci/hpa-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hpa, d := r.hpas["ci-gantry-worker"], r.deployments["ci-gantry-worker"]
	if len(r.hpas) != 1 || hpa == nil || d == nil || len(r.scalers) != 0 {
		t.Fatalf("hpa values: want one HorizontalPodAutoscaler for the worker Deployment and no ScaledObject, got %d and %d", len(r.hpas), len(r.scalers))
	}
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("hpa values: the HPA scales %+v, not the worker Deployment", ref)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 40 {
		t.Errorf("hpa values: replicas %v..%d, want 2..40", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if m := hpa.Spec.Metrics; len(m) != 1 || m[0].External == nil || m[0].External.Metric.Name != "gantry_workers_needed" ||
		m[0].External.Metric.Selector == nil || m[0].External.Metric.Selector.MatchLabels["cohort"] != "x86" ||
		m[0].External.Target.Type != autoscalingv2.AverageValueMetricType || m[0].External.Target.AverageValue == nil || m[0].External.Target.AverageValue.String() != "1" {
		t.Errorf("hpa values: want the External metric gantry_workers_needed{cohort=x86} at an average of 1 per replica: %+v", hpa.Spec.Metrics)
	}
	if b := hpa.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds != 600 {
		t.Errorf("hpa values: want a 600s scale-down stabilization window: %+v", b)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("hpa values: the worker Deployment sets replicas %d, which the HPA owns (each upgrade would reset them)", *d.Spec.Replicas)
	}
	// A worker scaled down drains within its pod's grace period.
	worker := checkConfig(t, "hpa values", "worker.yaml", r.configMaps["ci-gantry"].Data["worker.yaml"], config.RoleAll)
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 900 || worker.Worker.StopGrace.D() != 890*time.Second {
		t.Errorf("hpa values: grace %v and worker.stop_grace %v, want 900s and 890s (drained before the kubelet kills it)", g, worker.Worker.StopGrace)
	}

	// Values that cannot give a working farm are refused with a reason.
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"frontend.replicas=2"}, "needs storage.backend: s3"},
		{[]string{"storage.backend=s3"}, "needs storage.s3.bucket"},
		{[]string{"postgres.dsn="}, "postgres.dsn is required"},
		{[]string{"worker.kind=StatefulSet"}, "use Deployment or DaemonSet"},
		{[]string{"worker.autoscaling.kind=keda"}, "worker.autoscaling.prometheusAddress is required"},
		{[]string{"worker.autoscaling.kind=keda", "worker.autoscaling.prometheusAddress=http://p", "worker.kind=DaemonSet"}, "needs worker.kind: Deployment"},
		{[]string{"worker.autoscaling.kind=hpa", "worker.kind=DaemonSet"}, "needs worker.kind: Deployment"},
		{[]string{"worker.autoscaling.kind=hpa", "worker.autoscaling.minReplicas=5", "worker.autoscaling.maxReplicas=2"}, "minReplicas (5) is above maxReplicas (2)"},
		{[]string{"worker.autoscaling.kind=yes"}, `kind "yes": use none, keda`},
		{[]string{"worker.autoscaling.enabled=true"}, "worker.autoscaling.enabled was replaced by worker.autoscaling.kind"},
	} {
		if _, err := render(t, "", tc.set...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template --set %v: %v; want an error saying %q", tc.set, err, tc.want)
		}
	}
}
