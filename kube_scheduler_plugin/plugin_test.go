/*
Copyright 2026 The ascend-npu-k8s Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// The plugin's own logic against a service played by httptest: what it sends, how it reads
// the answers, which pods it activates, what its Binding carries. The real kube-scheduler and
// the real service run it in tests/real (test_kube_scheduler.py, test_noded.py,
// test_preemption.py, test_scheduler_scale.py); tests/unit/test_plugin_go.py runs these.
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const chips = "huawei.com/Ascend910"

// service answers each verb with what answers holds for it and records the bodies it got.
type service struct {
	mu      sync.Mutex
	bodies  map[string][]map[string]any
	answers map[string]reply
}

type reply struct {
	status int
	value  any
}

func newService(t *testing.T) (*service, *httptest.Server) {
	s := &service{bodies: map[string][]map[string]any{}, answers: map[string]reply{}}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verb := strings.TrimPrefix(r.URL.Path, "/")
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("%s: body is not JSON: %v", verb, err)
		}
		s.mu.Lock()
		s.bodies[verb] = append(s.bodies[verb], body)
		answer, ok := s.answers[verb]
		s.mu.Unlock()
		if !ok {
			t.Errorf("unexpected verb %s", verb)
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.status)
		_ = json.NewEncoder(w).Encode(answer.value)
	}))
	t.Cleanup(server.Close)
	return s, server
}

func (s *service) answer(verb string, status int, value any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[verb] = reply{status, value}
}

func (s *service) sent(verb string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[verb]
}

// handle is the framework's handle as far as the plugin uses it.
type handle struct {
	fwk.Handle
	client    kubernetes.Interface
	activated []map[string]*v1.Pod
}

func (h *handle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.activated = append(h.activated, pods)
}

func (h *handle) ClientSet() kubernetes.Interface { return h.client }

// keys are the pods of each Activate call, for a failure's message.
func (h *handle) keys() [][]string {
	calls := make([][]string, 0, len(h.activated))
	for _, pods := range h.activated {
		calls = append(calls, sets.List(sets.KeySet(pods)))
	}
	return calls
}

func plugin(t *testing.T, url string, percentage int32, h fwk.Handle) *AscendNPU {
	t.Helper()
	args := Args{URLPrefix: url, ManagedResources: []string{chips}, PercentageOfNodesToScore: percentage}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends watchFreed: these tests call activateRefused themselves
	built, err := New(ctx, &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, h)
	if err != nil {
		t.Fatal(err)
	}
	return built.(*AscendNPU)
}

func pod(name string, npu int64) *v1.Pod {
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	if npu > 0 {
		limits[chips] = *resource.NewQuantity(npu, resource.DecimalSI)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "main", Resources: v1.ResourceRequirements{Limits: limits}},
		}},
	}
}

func TestNewNamesTheArgThatIsWrong(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{"managedResources":["` + chips + `"]}`, "urlPrefix is required"},
		{`{"urlPrefix":"http://x"}`, "managedResources is required"},
		{`{"urlPrefix":"http://x","managedResources":["` + chips + `"],"percentageOfNodesToScore":101}`, "percentageOfNodesToScore 101 is not within 0..100"},
		{`{"urlPrefix":"http://x","managedResources":["` + chips + `"],"percentageOfNodesToScore":-1}`, "percentageOfNodesToScore -1 is not within 0..100"},
		{`{"urlPrefix":"https://x","managedResources":["` + chips + `"],"caFile":"/nonexistent/ca.crt"}`, "/nonexistent/ca.crt"},
	} {
		unknown := &runtime.Unknown{Raw: []byte(c.args), ContentType: runtime.ContentTypeJSON}
		_, err := New(context.Background(), unknown, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("args %s: error %v, want one naming %q", c.args, err, c.want)
		}
	}
}

func TestAPodAskingNoNPUIsSkippedWithoutACall(t *testing.T) {
	s, server := newService(t)
	pl := plugin(t, server.URL, 0, &handle{})
	result, status := pl.PreFilter(context.Background(), framework.NewCycleState(), pod("cpu", 0), nil)
	if result != nil || status.Code() != fwk.Skip {
		t.Fatalf("got %v, %v; want Skip", result, status)
	}
	if len(s.sent("place")) != 0 {
		t.Fatal("the service was asked about a pod asking no NPU")
	}
}

func TestPreFilterNarrowsTheNodesToTheServicesAnswer(t *testing.T) {
	s, server := newService(t)
	s.answer("place", 200, placeAnswer{NodeNames: []string{"n1", "n3"}})
	for _, percentage := range []int32{0, 100} {
		pl := plugin(t, server.URL, percentage, &handle{})
		result, status := pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p", 8), nil)
		if !status.IsSuccess() || result == nil || !result.NodeNames.Equal(sets.New("n1", "n3")) {
			t.Fatalf("percentage %d: got %v, %v; want n1 and n3", percentage, result, status)
		}
		body := s.sent("place")[len(s.sent("place"))-1]
		sent, named := body["PercentageOfNodesToScore"]
		if named != (percentage != 0) || (named && sent != float64(percentage)) {
			t.Errorf("percentage %d: the body's PercentageOfNodesToScore is %v", percentage, sent)
		}
		meta := body["Pod"].(map[string]any)["metadata"].(map[string]any)
		if meta["name"] != "p" || meta["uid"] != "uid-p" {
			t.Errorf("the body's pod is %v", meta)
		}
	}
}

// clocked is the plugin on a clock the test moves.
func clocked(pl *AscendNPU) *time.Time {
	clock := time.Unix(1_000_000, 0)
	pl.now = func() time.Time { return clock }
	return &clock
}

func TestARefusedPodIsActivatedOnceTheFreedCountMovesAndItsBackoffPassed(t *testing.T) {
	s, server := newService(t)
	h := &handle{}
	pl := plugin(t, server.URL, 0, h)
	clock := clocked(pl)
	for i, unresolvable := range []bool{true, false} {
		s.answer("place", 200, placeAnswer{Reason: "no room", Unresolvable: unresolvable, Freed: 3})
		_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p"+strconv.Itoa(i), 8), nil)
		want := map[bool]fwk.Code{true: fwk.UnschedulableAndUnresolvable, false: fwk.Unschedulable}[unresolvable]
		if status.Code() != want || status.Message() != "no room" {
			t.Fatalf("refusal %d: status %v, want %v with the service's reason", i, status, want)
		}
	}
	logger := klog.Background()
	pl.activateRefused(logger, 4)
	if len(h.activated) != 0 {
		t.Fatalf("activated %v within their backoff", h.keys())
	}
	*clock = clock.Add(initialBackoff)
	pl.activateRefused(logger, 3)
	if len(h.activated) != 0 {
		t.Fatalf("activated %v at the count they were refused at", h.keys())
	}
	pl.activateRefused(logger, 4)
	if len(h.activated) != 1 || len(h.activated[0]) != 2 || h.activated[0]["ns/p0"] == nil || h.activated[0]["ns/p1"] == nil {
		t.Fatalf("activated %v, want ns/p0 and ns/p1 once", h.keys())
	}
	pl.activateRefused(logger, 5)
	if len(h.activated) != 1 {
		t.Fatalf("activated %v: a pod twice for one refusal", h.keys())
	}
	// A pod placed after its refusal is no longer waiting: nothing to activate.
	s.answer("place", 200, placeAnswer{Freed: 5})
	pl.PreFilter(context.Background(), framework.NewCycleState(), pod("later", 8), nil)
	s.answer("place", 200, placeAnswer{NodeNames: []string{"n0"}})
	pl.PreFilter(context.Background(), framework.NewCycleState(), pod("later", 8), nil)
	*clock = clock.Add(initialBackoff)
	pl.activateRefused(logger, 6)
	if len(h.activated) != 1 {
		t.Fatalf("activated %v, a pod placed since its refusal among them", h.keys())
	}
}

func TestAPodRefusedAgainAndAgainIsActivatedNoMoreOftenThanKubeSchedulersBackoff(t *testing.T) {
	// A busy cluster: the count moves at every poll. Each refusal waits kube-scheduler's
	// backoff for its attempt before the pod is activated again.
	s, server := newService(t)
	s.answer("place", 200, placeAnswer{Reason: "no room"})
	h := &handle{}
	pl := plugin(t, server.URL, 0, h)
	clock := clocked(pl)
	var waited []time.Duration
	count := int64(0)
	for attempt := 1; attempt <= 6; attempt++ {
		pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p", 8), nil)
		refused := *clock
		for polls := 0; len(h.activated) < attempt && polls < 1000; polls++ {
			*clock = clock.Add(100 * time.Millisecond)
			count++
			pl.activateRefused(klog.Background(), count)
		}
		waited = append(waited, clock.Sub(refused))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if !slices.Equal(waited, want) {
		t.Fatalf("activated after %v, want %v", waited, want)
	}
	// A pod whose refusal is older than kube-scheduler's flush is forgotten; its next refusal
	// starts again at the first backoff.
	pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p", 8), nil)
	*clock = clock.Add(forgetAfter + time.Second)
	pl.activateRefused(klog.Background(), count) // the count has not moved: only the forgetting
	if _, kept := pl.refused.Load(types.UID("uid-p")); kept || len(h.activated) != 6 {
		t.Fatalf("a refusal older than %v was kept or activated (%d activations)", forgetAfter, len(h.activated))
	}
	pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p", 8), nil)
	*clock = clock.Add(initialBackoff)
	pl.activateRefused(klog.Background(), count+1)
	if len(h.activated) != 7 {
		t.Fatal("a refusal after the forgetting did not start at the first backoff")
	}
}

func TestTheServicesErrorIsTheStatusNamingTheVerb(t *testing.T) {
	s, server := newService(t)
	s.answer("place", 400, map[string]string{"Error": "PercentageOfNodesToScore 101 is not within 0..100"})
	pl := plugin(t, server.URL, 0, &handle{})
	_, status := pl.PreFilter(context.Background(), framework.NewCycleState(), pod("p", 8), nil)
	message := status.AsError().Error()
	if status.Code() != fwk.Error || !strings.Contains(message, "AscendNPU place: 400 Bad Request") ||
		!strings.Contains(message, "PercentageOfNodesToScore 101") {
		t.Fatalf("status %v", status)
	}
}

func TestBindCarriesTheReservedChipsAndStampsPredicateTimeJustBefore(t *testing.T) {
	s, server := newService(t)
	s.answer("place", 200, placeAnswer{NodeNames: []string{"n0"}})
	annotations := map[string]string{"huawei.com/Ascend910": "Ascend910-0,Ascend910-1", predicateTime: "1"}
	s.answer("reserve", 200, reserveAnswer{Annotations: annotations})
	client := fake.NewSimpleClientset()
	var bound *v1.Binding
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" {
			bound = action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		}
		return true, nil, nil
	})
	pl := plugin(t, server.URL, 0, &handle{client: client})
	state := framework.NewCycleState()
	ctx := context.Background()
	p := pod("p", 2)
	if _, status := pl.PreFilter(ctx, state, p, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := pl.Reserve(ctx, state, p, "n0"); !status.IsSuccess() {
		t.Fatal(status)
	}
	reserved := s.sent("reserve")[0]
	if reserved["Node"] != "n0" {
		t.Fatalf("reserve's body names node %v", reserved["Node"])
	}
	before := time.Now().UnixNano()
	if status := pl.Bind(ctx, state, p, "n0"); !status.IsSuccess() {
		t.Fatal(status)
	}
	if bound == nil || bound.Target.Name != "n0" || bound.Name != "p" || bound.UID != p.UID {
		t.Fatalf("binding %v", bound)
	}
	if bound.Annotations["huawei.com/Ascend910"] != "Ascend910-0,Ascend910-1" {
		t.Errorf("the binding's annotations are %v", bound.Annotations)
	}
	stamped, err := strconv.ParseInt(bound.Annotations[predicateTime], 10, 64)
	if err != nil || stamped < before {
		t.Errorf("predicate-time %q is not stamped at the Binding", bound.Annotations[predicateTime])
	}
	if annotations[predicateTime] != "1" {
		t.Error("Bind changed the service's answer in place")
	}
}

func TestAPodThePluginSkippedIsLeftToTheDefaultBinder(t *testing.T) {
	pl := plugin(t, "http://127.0.0.1:1", 0, &handle{})
	state := framework.NewCycleState()
	p := pod("cpu", 0)
	if status := pl.Reserve(context.Background(), state, p, "n0"); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := pl.Bind(context.Background(), state, p, "n0"); status.Code() != fwk.Skip {
		t.Fatalf("Bind of a pod not ours: %v, want Skip", status)
	}
}
