"""Reads cder's APEL spool with python-dirq's QueueSimple (as ssmsend does)
and parses every message with APEL's own RecordFactory (vendored, unmodified,
in third-party/apel). Prints one JSON object: the messages as written and the
records as APEL's AcceleratorRecord holds them after its checks.

usage: apel_check.py SPOOL_DIR   (third-party/apel on PYTHONPATH)
"""
import json
import sys

from dirq.QueueSimple import QueueSimple
from apel.db.loader.record_factory import RecordFactory
from apel.db.records.accelerator import AcceleratorRecord

queue = QueueSimple(sys.argv[1])
messages, records = [], []
name = queue.first()
while name:
    if queue.lock(name):
        # QueueSimple hands back the bytes as stored; the loader reads text.
        text = queue.get(name).decode("utf-8")
        messages.append(json.loads(text))
        for record in RecordFactory().create_records(text):
            assert isinstance(record, AcceleratorRecord), type(record)
            record._check_fields()
            records.append({k: record.get_field(k) for k in record._db_fields})
        queue.unlock(name)
    name = queue.next()
json.dump({"elements": queue.count(), "messages": messages, "records": records}, sys.stdout)
