"""``vllm-neuron serve`` as users run it: a real server process on a loopback port (its engine in
a process of its own, as vLLM starts it), queried with the ``openai`` client and plain HTTP."""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import time

import httpx
import openai
import pytest
from conftest import BASE_ENV, GREEDY, PROMPTS, completions

import helpers

MAX_MODEL_LEN = 256
NO_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module")
def server(llama, tmp_path_factory):
    """The server (default multiprocessing: API process, engine core process); its base URL."""
    port = helpers.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NEURONX_", "VLLM_"))}
    env.update({**BASE_ENV, "TORCH_NEURONX_STRICT_FALLBACK": "1"})
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+")
    process = subprocess.Popen([shutil.which("vllm-neuron"), "serve", str(llama), "--host", "127.0.0.1",
                                "--port", str(port), "--dtype", "float32", "--enforce-eager", "--seed", "0",
                                "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory-bytes", "16M"],
                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            process.kill()
            pytest.fail(f"vllm-neuron serve did not come up:\n{log.read()[-6000:]}")
        time.sleep(1)
    yield url
    os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C: the server stops its engine process
    try:
        assert process.wait(timeout=60) is not None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    log.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def cpu_build(cpu_greedy):
    """The CPU build's greedy texts of the prompts (offline)."""
    return [c["text"] for c in completions(cpu_greedy, 1)]


def complete(client, model_name, prompt, **options):
    options = {"temperature": 0, "max_tokens": GREEDY["max_tokens"], "extra_body": NO_EOS, **options}
    return client.completions.create(model=model_name, prompt=prompt, **options)


def test_health_models_and_metrics(server, client, llama):
    assert httpx.get(f"{server}/health").status_code == 200
    assert [m.id for m in client.models.list().data] == [str(llama)]
    metrics = httpx.get(f"{server}/metrics").text
    assert "vllm:num_requests_running" in metrics and "vllm:kv_cache_usage_perc" in metrics


def test_completions_give_the_cpu_builds_text(client, model_name, cpu_build):
    for prompt, expected in list(zip(PROMPTS, cpu_build))[:4]:
        assert complete(client, model_name, prompt).choices[0].text == expected


def test_streaming_gives_the_same_text_in_pieces(client, model_name, cpu_build):
    chunks = [c.choices[0].text for c in complete(client, model_name, PROMPTS[2], stream=True)]
    assert len(chunks) > 1 and "".join(chunks) == cpu_build[2]


def test_sixteen_concurrent_requests_give_the_cpu_builds_texts(client, model_name, cpu_build):
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(lambda p: complete(client, model_name, p).choices[0].text, PROMPTS))
    assert texts == cpu_build


def test_chat_completions_apply_the_tokenizers_chat_template(client, model_name):
    """A chat request is the completion of the prompt its chat template renders."""
    chat = client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "what is 2+2?"}],
                                          temperature=0, max_tokens=16, extra_body=NO_EOS)
    plain = complete(client, model_name, "user: what is 2+2?\nassistant:", max_tokens=16)
    assert chat.choices[0].message.content == plain.choices[0].text


@pytest.mark.parametrize("bad", ["prompt longer than the context", "max_tokens beyond the context",
                                 "malformed body", "unknown model"])
def test_bad_requests_get_vllms_errors_and_the_server_keeps_serving(server, client, model_name, cpu_build, bad):
    if bad == "malformed body":
        response = httpx.post(f"{server}/v1/completions", content=b'{"model": "x", "prompt": ',
                              headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
    else:
        expected = openai.NotFoundError if bad == "unknown model" else openai.BadRequestError
        with pytest.raises(expected):
            if bad == "prompt longer than the context":
                complete(client, model_name, "a" * (MAX_MODEL_LEN + 10))
            elif bad == "max_tokens beyond the context":
                complete(client, model_name, "hello", max_tokens=MAX_MODEL_LEN * 4)
            else:
                complete(client, "no-such-model", "hello")
    assert complete(client, model_name, PROMPTS[0]).choices[0].text == cpu_build[0]
