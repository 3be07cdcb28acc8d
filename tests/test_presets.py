"""Built-in presets: they load, their parameter counts match the published totals, files round-trip."""

import json

import pytest
import yaml

from costmodel.spec.errors import SpecError
from costmodel.spec.presets import cluster_to_dict, load_cluster, load_model, model_to_dict, preset_info, preset_names
from costmodel.spec.specs import ClusterSpec, ModelSpec

MODELS = preset_names("models")
CLUSTERS = preset_names("clusters")


def test_required_presets_exist():
    required_models = {
        "gpt3-175b",
        "gpt-1.7b",
        "gpt-3.6b",
        "gpt-7.5b",
        "gpt-18.4b",
        "gpt-39.1b",
        "gpt-76.1b",
        "gpt-145.6b",
        "gpt-310.1b",
        "gpt-529.6b",
        "gpt-1t",
        "gpt-22b",
        "gpt-530b",
        "gpt-2-1b",
        "gpt-2-2b",
        "gpt-2-4b",
        "gpt-2-8b",
        "gpt3-5b",
        "gpt3-20b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3.1-8b",
        "llama3.1-70b",
        "llama3.1-405b",
        "nemotron-8b",
        "nemotron-22b",
        "nemotron4-340b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "deepseek-v3",
    }
    assert required_models <= set(MODELS)
    assert {"a100-40g", "a100-80g", "h100-sxm", "h800", "h200", "b200", "sg2262-like"} <= set(CLUSTERS)


@pytest.mark.parametrize("name", MODELS)
def test_model_preset_loads_and_is_documented(name):
    m = load_model(name)
    assert isinstance(m, ModelSpec) and m.name == name and m.params > 0
    doc = preset_info("models", name)
    assert doc["description"] and doc["source"]


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_preset_loads_and_follows_the_format(name):
    c = load_cluster(name)
    assert isinstance(c, ClusterSpec) and c.name == name
    c.device.engines_for("intra"), c.device.engines_for("inter")
    doc, ref = preset_info("clusters", name), preset_info("clusters", "a100-80g")
    assert set(doc) - {"nvlink_domain"} == set(ref)  # the reference preset's keys (+ an NVLink domain beyond a node)
    assert doc["sources"] and doc["assumptions"]
    assert set(doc["device"]) <= set(ref["device"]) | {"fp8_gemm_efficiency", "fp8_transpose"}  # (Blackwell's)


# Published totals (params, active params), with the source of each number.
PUBLISHED = {
    "gpt3-175b": (175e9, None),  # Brown et al. 2020, Table 2.1
    "gpt-1.7b": (1.7e9, None),  # Narayanan et al. 2021, Table 1 (label rounded up from 1.65B)
    "gpt-18.4b": (18.4e9, None),  # Narayanan et al. 2021, Table 1
    "gpt-145.6b": (145.6e9, None),  # Narayanan et al. 2021, Table 1
    "gpt-1t": (1008e9, None),  # Narayanan et al. 2021, Table 1
    "gpt-22b": (22e9, None),  # Korthikanti et al. 2022, Table 3
    "gpt-530b": (530e9, None),  # Korthikanti et al. 2022, Table 3 (MT-NLG)
    "gpt-2-8b": (8.67e9, None),  # Megatron-LM README 2020
    "llama2-7b": (6.74e9, None),  # meta-llama/Llama-2-7b-hf model card
    "llama2-70b": (68.98e9, None),  # meta-llama/Llama-2-70b-hf safetensors total
    "llama3-8b": (8.03e9, None),  # meta-llama/Meta-Llama-3-8B model card
    "llama3-70b": (70.6e9, None),  # meta-llama/Meta-Llama-3-70B model card
    "llama3.1-405b": (405.9e9, None),  # meta-llama/Llama-3.1-405B (Dubey et al. 2024: 405B)
    "nemotron4-340b": (341e9, None),  # Nemotron-4 340B report: 9.4B embedding + 331.6B non-embedding
    "mixtral-8x7b": (46.7e9, 12.9e9),  # Jiang et al. 2024, section 2
    "mixtral-8x22b": (141e9, 39e9),  # Mistral AI announcement, 2024-04-17
    "qwen3-30b-a3b": (30.5e9, 3.3e9),  # Qwen3 technical report, Table 2
    "qwen3-235b-a22b": (235e9, 22e9),  # Qwen3 technical report, Table 2
    "deepseek-v3": (671e9, 37e9),  # DeepSeek-V3 technical report, abstract and section 4.2
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    total, active = PUBLISHED[name]
    m = load_model(name)
    tol = 0.035 if name == "gpt-1.7b" else 0.03
    assert m.params == pytest.approx(total, rel=tol)
    if active:
        assert m.active_params == pytest.approx(active, rel=tol)
    else:
        assert m.active_params == m.params


def test_moe_structure():
    ds = load_model("deepseek-v3")
    assert (ds.dense_layers, ds.moe_layers, ds.shared_experts, ds.is_mla) == (3, 58, 1, True)
    assert load_model("qwen3-235b-a22b").moe_layers == 94


def test_cluster_figures():
    assert load_cluster("h800").intra_link.effective_bw_bytes_per_s == pytest.approx(160e9)  # DeepSeek-V3 §3.2.2
    # the capacity PyTorch's allocator reports ("GPU 0 has a total capacity of ... GiB")
    assert load_cluster("h200").device.hbm_bytes == pytest.approx(139.80 * 2**30)
    assert load_cluster("b200").device.hbm_bytes == pytest.approx(178.35 * 2**30)
    assert load_cluster("h100-sxm").device.hbm_bytes == pytest.approx(79.19 * 2**30)
    assert load_cluster("a100-40g").device.hbm_bw_bytes_per_s == pytest.approx(1555e9)
    sg = load_cluster("sg2262-like").device
    cdma = sg.engines_for("intra")
    assert (cdma.name, cdma.count, cdma.uses_compute) == ("cdma", 4, False)
    assert sg.engines_for("inter") is cdma and sg.comm_compute_interference == 0.0


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_round_trip(name, tmp_path):
    c = load_cluster(name).with_gpus(64)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(cluster_to_dict(c)))
    assert load_cluster(str(p)) == c


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"])
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_model_round_trip(name, suffix, tmp_path):
    m = load_model(name)
    p = tmp_path / f"spec{suffix}"
    d = model_to_dict(m)
    p.write_text(json.dumps(d) if suffix == ".json" else yaml.safe_dump(d))
    assert load_model(str(p)) == m


def test_unknown_preset():
    with pytest.raises(SpecError) as e:
        load_model("no-such-model")
    assert e.value.field == "model" and "`planner presets` lists all" in str(e.value)
    with pytest.raises(SpecError) as e:  # the closest names, not all of them (issue 42: one short line)
        load_model("llama3-8")
    assert "did you mean llama3-8b" in str(e.value) and len(str(e.value)) < 200
    with pytest.raises(SpecError) as e:
        load_cluster("no-such-cluster")
    assert e.value.field == "cluster"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", ""])
def test_malformed_file(text, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(SpecError):
        load_model(str(p))
    with pytest.raises(SpecError):
        load_cluster(str(p))


def test_malformed_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("layers: [1, 2\n")
    with pytest.raises(SpecError):
        load_model(str(p))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError):
        load_model(str(tmp_path / "absent.json"))


def test_unknown_key(tmp_path):
    d = model_to_dict(load_model("llama3-8b"))
    d["n_layers_typo"] = 3
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d))
    with pytest.raises(SpecError) as e:
        load_model(str(p))
    assert e.value.field == "model.n_layers_typo"

    c = cluster_to_dict(load_cluster("h100-sxm"))
    c["device"]["tensor_cores"] = 528
    p = tmp_path / "c.json"
    p.write_text(json.dumps(c))
    with pytest.raises(SpecError) as e:
        load_cluster(str(p))
    assert e.value.field == "device.tensor_cores"


def test_invalid_value_names_field(tmp_path):
    d = model_to_dict(load_model("llama3-8b"))
    d["activation"] = "tanh"
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError) as e:
        load_model(str(p))
    assert e.value.field == "model.activation"
