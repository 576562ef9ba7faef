"""What a client has learnt the server does: the original or this project's api.

Each is None until a reply said, then True or False for the client's lifetime. The
original ignores what it does not know (``count``, ``batch=1``, a framed body's media
type) rather than refusing it, so a capability is learnt from how a reply looks, never
assumed: a wrong guess would lose messages (a batch publish the original reads as one
message) or read a batch of one as the whole queue.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Capabilities:
    # Batch fetch (``count``): True once a reply was multipart/mixed; False once a batch
    # request was answered with a single message (the original): single fetches then.
    batch_fetch: bool | None = None
    # Batch publish (``publish_many``): True once a batch of one was answered with the
    # name list; False once it was answered as a single publish: single publishes then.
    batch_publish: bool | None = None
    # The framed batch body (``zosciimq.protocol.FRAMED_BATCH``): True once a batch reply
    # listed it in Accept-Post; False once one was refused (an earlier api version).
    framed_publish: bool | None = None
