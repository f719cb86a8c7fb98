"""The peer profile's stack classifier, py-spy parsing, attribution and flame graph
(``bench.profile_stacks``, ``bench.profile_cpu``, ``bench.profile_svg``; no processes)."""

from __future__ import annotations

import pytest

from bench.peer_apps import ROOT
from bench.profile_cpu import attribute
from bench.profile_stacks import (
    BLOCKS,
    DRIVER_ROLE,
    JOBGEN,
    OTHER,
    PRODUCE,
    READ,
    RECEIVER,
    RECEIVER_ROLE,
    SPARK,
    TASKS_ROLE,
    TRACKER,
    UNATTRIBUTED,
    USER,
    Rule,
    classify,
    native_part,
    parse_frame,
    parse_raw,
)
from bench.profile_svg import flame_svg

R = str(ROOT)  # the checkout's own path: frames under it are the project's
SP = f"{R}/.venv/lib/python3.11/site-packages"
STD = "/root/.pyenv/versions/3.11.7/lib/python3.11"
WORKER = [f"main ({SP}/pyspark/worker.py:1900)", f"process ({SP}/pyspark/worker.py:1800)"]
RECV = [f"Thread._bootstrap ({STD}/threading.py:1002)",
        f"SocketReceiver._receive ({R}/receiver/socket_receiver.py:90)"]


def test_parse_frame() -> None:
    assert parse_frame(f"decode_item ({R}/receiver/items.py:130)") == (
        "decode_item", f"{R}/receiver/items.py")
    assert parse_frame("<module> (t.py)") == ("<module>", "t.py")
    assert parse_frame("no file") == ("no file", "")


@pytest.mark.parametrize(("stack", "side", "part"), [
    # The receiver: reading and splitting, then handing lines to the block generator.
    ([*RECV, f"SocketReceiver._read_lines ({R}/receiver/socket_receiver.py:120)"],
     "worker", RECEIVER),
    ([*RECV, f"BlockGenerator.add_data ({R}/receiver/block_generator.py:80)",
             f"Condition.notify ({STD}/threading.py:380)"], "worker", BLOCKS),
    ([f"BlockGenerator._push_loop ({R}/receiver/block_generator.py:200)",
      f"Block.encode ({R}/receiver/block.py:90)",
      f"writer ({SP}/fastavro/_write_py.py:10)"], "worker", BLOCKS),
    ([f"ReceiverSupervisor.push_block ({R}/receiver/supervisor.py:150)",
      f"KafkaWriteAheadLog.write ({R}/wal/kafka_log.py:250)",
      f"frame_record ({R}/wal/framing.py:40)"], "worker", PRODUCE),
    ([f"ReceiverSupervisor.push_block ({R}/receiver/supervisor.py:150)",
      f"DriverClient.add_block ({R}/receiver/driver_client.py:60)",
      f"_UnaryUnaryMultiCallable.__call__ ({SP}/grpc/_channel.py:1100)"], "worker", TRACKER),
    # The driver.
    ([f"_serve ({SP}/grpc/_server.py:1000)",
      f"ReceiverEndpoint.AddBlock ({R}/driver/receiver_tracker/endpoint.py:70)",
      f"ReceivedBlockTracker.add_block ({R}/driver/scheduler/received_block_tracker.py:90)",
      f"KafkaWriteAheadLog.write ({R}/wal/kafka_log.py:250)"], "driver", TRACKER),
    ([f"JobGenerator._run ({R}/driver/scheduler/job_generator.py:210)",
      f"block_rdd ({R}/driver/dstream/block_rdd.py:140)",
      f"SparkContext.parallelize ({SP}/pyspark/core/context.py:800)",
      f"GatewayClient.send_command ({SP}/py4j/java_gateway.py:1000)"], "driver", JOBGEN),
    ([f"JobScheduler._run ({R}/driver/scheduler/job_scheduler.py:100)",
      f"_record ({R}/bench/peer_app.py:60)",
      f"RDD.sum ({SP}/pyspark/core/rdd.py:2000)"], "driver", USER),
    ([f"CallbackConnection.run ({SP}/py4j/clientserver.py:500)",
      f"GatewayConnection.send_command ({SP}/py4j/clientserver.py:520)"], "driver", SPARK),
    # The tasks: reading blocks is driven by the shuffle above it; the user's lambdas.
    ([*WORKER, f"ExternalMerger.mergeValues ({SP}/pyspark/shuffle.py:250)",
               f"_read_blocks ({R}/driver/dstream/block_rdd.py:105)",
               f"WalReader.read_many ({R}/wal/reader.py:300)"], "worker", READ),
    ([*WORKER, f"ExternalMerger.mergeValues ({SP}/pyspark/shuffle.py:250)",
               f"_read_blocks ({R}/driver/dstream/block_rdd.py:105)",
               f"decode_item ({R}/receiver/items.py:130)"], "worker", READ),
    ([*WORKER, f"_read_blocks ({R}/driver/dstream/block_rdd.py:105)",
               f"Block.decode ({R}/receiver/block.py:110)"], "worker", READ),
    ([*WORKER, f"ExternalMerger.mergeValues ({SP}/pyspark/shuffle.py:250)",
               f"main.<locals>.setup.<locals>.<lambda> ({R}/bench/peer_app.py:120)"],
     "worker", USER),
    ([*WORKER, f"ExternalMerger.mergeValues ({SP}/pyspark/shuffle.py:250)"], "worker", SPARK),
    ([*WORKER, f"BatchedSerializer.dump_stream ({SP}/pyspark/serializers.py:200)"],
     "worker", SPARK),
    # Neither: other Python.
    ([f"Thread._bootstrap ({STD}/threading.py:1002)",
      f"ListenerBus._run ({R}/driver/scheduler/listener.py:190)"], "driver", OTHER),
    ([f"Recorder.onBatchCompleted ({R}/bench/peer_app.py:150)"], "driver", OTHER),
    ([f"Thread._bootstrap ({STD}/threading.py:1002)"], "driver", OTHER),
    ([f"main ({R}/bench/peer_app.py:160)", f"Event.wait ({STD}/threading.py:600)"],
     "driver", OTHER),
])
def test_classify(stack: list[str], side: str, part: str) -> None:
    assert classify(stack, side)[0] == part


def test_classify_other_names_the_leaf_most_non_stdlib_file() -> None:
    stack = [f"Thread._bootstrap ({STD}/threading.py:1002)",
             f"MetricsServer.serve ({R}/driver/ui/status_server.py:50)",
             f"BaseServer.serve_forever ({STD}/socketserver.py:200)"]
    assert classify(stack, "driver") == (OTHER, "driver/ui/status_server.py")
    assert classify([f"run ({STD}/threading.py:900)"], "driver") == (
        OTHER, "stdlib:threading.py")
    assert classify([], "worker") == (OTHER, "(no frames)")


def test_the_kafka_log_is_the_receivers_produce_in_a_worker_and_the_tracker_in_the_driver(
) -> None:
    stack = [f"poll_loop ({R}/wal/kafka_log.py:180)"]
    assert classify(stack, "worker")[0] == PRODUCE
    assert classify(stack, "driver")[0] == TRACKER


def test_native_threads() -> None:
    assert native_part("rdk:broker1", RECEIVER_ROLE) == PRODUCE
    assert native_part("rdk:main", TASKS_ROLE) == READ
    assert native_part("rdk:main", DRIVER_ROLE) == TRACKER
    assert native_part("grpc_global_tim", DRIVER_ROLE) == TRACKER
    assert native_part("python", DRIVER_ROLE) is None


RAW = "\n".join([
    'process 10:"python -c import sys, bench.peer_app as a; sys.exit(a.main()) --impl ours";'
    f"thread (11): job-generator;JobGenerator._run ({R}/driver/scheduler/job_generator.py:210) 30",
    'process 10:"python -c x; y";process 20:"java -cp x";process 30:"python -m daemon";'
    'process 31:"python -m daemon";thread (32): socket-receiver;'
    f"SocketReceiver._read_lines ({R}/receiver/socket_receiver.py:120) 50",
    'process 10:"python";process 31:"python -m daemon";thread (0x7f00);'
    f"f ({R}/x.py:1) 7",
    "garbage line",
])


def test_parse_raw_takes_the_last_process_frame_and_the_thread() -> None:
    samples = parse_raw(RAW, root_pid=10)
    assert [(s.pid, s.tid, s.thread, s.count) for s in samples] == [
        (10, 11, "job-generator", 30), (31, 32, "socket-receiver", 50), (31, None, "", 7)]
    assert "sys.exit" in samples[0].cmdline
    assert samples[1].frames == (f"SocketReceiver._read_lines ({R}/receiver/socket_receiver.py"
                                 ":120)",)


def test_parse_raw_keeps_a_command_line_with_line_breaks_in_one_record() -> None:
    text = ('process 1:"python t.py";process 2:"python -c import x\nx.run()";'
            'thread (3);<module> (<string>:2) 9\n'
            'process 1:"python t.py";thread (1);<module> (t.py:1) 4\n')
    samples = parse_raw(text, root_pid=1)
    assert [(s.pid, s.tid, s.count, s.frames) for s in samples] == [
        (2, 3, 9, ("<module> (<string>:2)",)), (1, 1, 4, ("<module> (t.py:1)",))]
    assert samples[0].cmdline == "python -c import x\nx.run()"


def test_attribute_scales_each_thread_to_its_proc_cpu() -> None:
    samples = parse_raw(RAW, root_pid=10)
    roles = {10: DRIVER_ROLE, 31: RECEIVER_ROLE}
    threads = {(10, 11): ("python", 0.15), (31, 32): ("python", 0.4),
               (31, 33): ("rdk:broker1", 0.2), (31, 34): ("python", 0.05)}
    att = attribute(samples, 100, roles, threads, {10: 0.2, 31: 0.8})
    assert att.cpu[JOBGEN][DRIVER_ROLE] == pytest.approx(0.15)  # 30 samples, 0.15 CPU s
    assert att.sampled[JOBGEN][DRIVER_ROLE] == pytest.approx(0.3)
    assert att.cpu[RECEIVER][RECEIVER_ROLE] == pytest.approx(0.4)
    assert att.cpu[PRODUCE][RECEIVER_ROLE] == pytest.approx(0.2)  # the native thread
    assert att.unscaled_s == pytest.approx(0.07)  # no native id: samples / rate
    # The process's CPU not in any part: driver 0.2 - 0.15; receiver 0.8 - 0.4 - 0.2 - 0.07.
    assert att.cpu[UNATTRIBUTED][DRIVER_ROLE] == pytest.approx(0.05)
    assert att.cpu[UNATTRIBUTED][RECEIVER_ROLE] == pytest.approx(0.13)
    svg = flame_svg(att.stacks[RECEIVER_ROLE], "receiver", "worker")
    assert svg.startswith("<svg") and "socket-receiver" in svg and "rdk:broker1" in svg


def test_a_comprehension_counts_as_the_function_it_is_written_in() -> None:
    rule = Rule(READ, "receiver/items.py", r"_?decode\w*")
    assert rule.matches("decode_items.<locals>.<listcomp>", "/x/receiver/items.py", "worker")
    assert rule.matches("decode_item", "/x/receiver/items.py", "worker")
    assert not rule.matches("encode_item", "/x/receiver/items.py", "worker")
    lam = Rule(READ, "bench/peer_app.py", r"<lambda>|_record")
    assert lam.matches("main.<locals>.setup.<locals>.<lambda>", "/r/bench/peer_app.py", "any")
