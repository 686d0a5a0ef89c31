"""Screenshots in a mention: the listener's queueing → the worker's job → the files downloaded from
the Slack stand-in with the bot token → checked by content and resized (infra/images.py) → the
real `openai` client → the sandbox vLLM, which loads the image parts as vLLM does and counts them
against `--limit-mm-per-prompt`. The answer in the thread names the images read; bad files each
get their line and the rest of the mention is still answered."""

from __future__ import annotations

import base64
import io
import os

import pytest
from PIL import Image, ImageDraw

from infra.images import MAX_IMAGE_BYTES
from infra.sandbox.vllm import LatencyModel, VllmEmulator
from test_agent_mentions import ALICE, LOGS, answer, unscripted

MENTION = "<@UTPUBOT> what's wrong? the dashboard and the logs are attached"


def screenshot(width: int, height: int, fmt: str = "PNG", *, exif: bool = False, noise: int = 0) -> bytes:
    """A dashboard-like picture: panels, a red error bar and some text; `noise` rows of random pixels
    (a photo-like band that does not compress) make the file as big as a real screenshot's."""
    image = Image.new("RGB", (width, height), (245, 245, 245))
    if noise:
        image.paste(Image.frombytes("RGB", (width, noise), os.urandom(width * noise * 3)), (0, height // 2))
    draw = ImageDraw.Draw(image)
    for i in range(0, width, max(1, width // 6)):
        draw.rectangle([i + 8, 40, i + width // 6 - 8, height // 2], outline=(60, 60, 60), width=3)
    draw.rectangle([0, height - 60, width, height], fill=(200, 30, 30))
    draw.text((20, 10), "TPU duty cycle 0% since 10:02 UTC", fill=(0, 0, 0))
    out = io.BytesIO()
    kwargs: dict = {}
    if exif:
        tags = Image.Exif()
        tags[0x010F] = "PhoneMaker"  # Make
        tags[0x8825] = {1: "N", 2: (59.0, 20.0, 0.0)}  # GPS: where the photo was taken
        kwargs["exif"] = tags.tobytes()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def image_parts(request: dict) -> list[dict]:
    return [part for message in request["messages"] if isinstance(message.get("content"), list)
            for part in message["content"] if part.get("type") == "image_url"]


def decoded(part: dict) -> Image.Image:
    header, data = part["image_url"]["url"].split(",", 1)
    assert header in ("data:image/png;base64", "data:image/jpeg;base64")
    return Image.open(io.BytesIO(base64.b64decode(data)))


def text_of(request: dict) -> str:
    content = request["messages"][1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@pytest.fixture(scope="module")
def emu():
    with VllmEmulator(latency=LatencyModel.instant()) as emulator:
        yield emulator


@pytest.fixture
def bot(emu, make_bot):
    unscripted(emu).images.clear()
    return make_bot(poll_interval="0.2s", admins="UADMIN", gemma_base_url=emu.base_url)


def test_two_screenshots_and_a_log_reach_the_model_resized_with_the_digest_and_the_answer_names_both(bot, emu):
    files = [bot.slack.add_file("F0DASH", "dashboard.png", screenshot(1920, 1080), "image/png"),
             bot.slack.add_file("F0ERR", "errors.png", screenshot(900, 1600), "image/png"),
             bot.slack.add_file("F0LOG", "incident.log", LOGS.encode())]
    bot.mention(MENTION, user=ALICE, channel="C0IMG1", files=files)
    text = answer(bot, "C0IMG1").text

    first = emu.requests[0]
    parts = image_parts(first)
    # Gemma 4's processor size: ≤ 280 × 3×3 patches of 16 px, sides multiples of 48, aspect kept.
    assert [decoded(p).size for p in parts] == [(1056, 576), (576, 1056)]
    assert "L1-L50 file incident.log" in text_of(first) and "DEADLINE_EXCEEDED" in text_of(first)
    assert "image 1 is dashboard.png (1920×1080, sent as 1056×576)" in text_of(first)
    # The server loaded both and counted them: 22×12 soft tokens + <boi><eoi> each.
    assert [(i.width, i.height, i.prompt_tokens) for i in emu.images[0]] == [(1056, 576, 266), (576, 1056, 266)]
    assert "Read 2 images: dashboard.png and errors.png." in text
    # The heuristic says what it received, and that it is no model.
    assert "heuristic stand-in, not Gemma" in text and "It received 2 images (1056×576, 576×1056)" in text
    # base64 never reaches Slack
    assert not any("base64" in str(c.body) for c in bot.slack.calls)


def test_images_earlier_in_the_thread_are_read_newest_first(bot, emu):
    old = bot.slack.add_file("F0OLD", "yesterday.png", screenshot(640, 480), "image/png")
    new = bot.slack.add_file("F0NEW", "today.png", screenshot(800, 600), "image/png")
    root = bot.slack.add_message("C0IMG2", "the dashboard yesterday", user=ALICE, files=[old])
    bot.slack.add_message("C0IMG2", "and today", user=ALICE, thread_ts=root, files=[new])
    bot.mention("<@UTPUBOT> what changed?", user=ALICE, channel="C0IMG2", thread_ts=root)
    text = answer(bot, "C0IMG2").text
    assert [decoded(p).size for p in image_parts(emu.requests[0])] == [(800, 600), (640, 480)]
    assert "Read 2 images: today.png and yesterday.png." in text


def test_five_images_against_a_limit_of_four_send_the_first_four_and_name_the_fifth(bot, emu):
    files = [bot.slack.add_file(f"F0P{i}", f"panel{i}.png", screenshot(300 + i, 200), "image/png")
             for i in range(1, 6)]
    bot.mention("<@UTPUBOT> what do these show?", user=ALICE, channel="C0IMG3", files=files)
    text = answer(bot, "C0IMG3").text
    assert [decoded(p).size for p in image_parts(emu.requests[0])] == [(301, 200), (302, 200), (303, 200), (304, 200)]
    assert "Read 4 images: panel1.png, panel2.png, panel3.png and panel4.png." in text
    assert ("Not read: panel5.png: the model takes at most 4 images per message (--limit-mm-per-prompt), "
            "newest first.") in text
    # The fifth was not even asked for: nothing is downloaded that would not be sent.
    assert [c.body.get("file") for c in bot.slack.calls_to("files.info")] == ["F0P1", "F0P2", "F0P3", "F0P4"]


def bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A 1-bit PNG claiming 20,000 × 20,000 pixels: ~50 KiB that would decode to 400 MP (1.2 GB as RGB)."""
    out = io.BytesIO()
    Image.new("1", (width, height)).save(out, "PNG")
    return out.getvalue()


def animated() -> bytes:
    frames = [Image.new("RGB", (64, 64), (i * 80, 0, 0)) for i in range(3)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    return out.getvalue()


BAD_FILES = {
    "not an image": ("notes.png", lambda: b"just some text that someone named .png\n",
                     "notes.png is not an image: its content is not PNG, JPEG, WebP, GIF or BMP, whatever its name "
                     "says; not read."),
    "decompression bomb": ("bomb.png", bomb,
                           # past twice the limit Pillow's own guard refuses it while reading the header
                           "bomb.png claims more than 100 megapixels; the limit is 50 megapixels, so it was not "
                           "decoded (a decompression bomb looks like this)."),
    "bomb under Pillow's error": ("wide.png", lambda: bomb(9_000, 6_000),
                                  "wide.png claims 9,000×6,000 pixels; the limit is 50 megapixels, so it was not "
                                  "decoded (a decompression bomb looks like this)."),
    "animated": ("spinner.gif", animated, "spinner.gif is animated (3 frames); attach a still screenshot instead."),
    "huge": ("huge.png", lambda: b"\x89PNG\r\n\x1a\n" + os.urandom(MAX_IMAGE_BYTES),
             f"Could not read huge.png: huge.png is {MAX_IMAGE_BYTES + 8:,} bytes; the limit is {MAX_IMAGE_BYTES:,}"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_image_gets_its_line_and_the_log_and_the_good_image_are_still_read(bot, emu, kind):
    name, make, line = BAD_FILES[kind]
    files = [bot.slack.add_file("F0BAD", name, make(), "image/gif" if name.endswith(".gif") else "image/png"),
             bot.slack.add_file("F0GOOD", "good.png", screenshot(1280, 720), "image/png"),
             bot.slack.add_file("F0LOG", "incident.log", LOGS.encode())]
    bot.mention(MENTION, user=ALICE, channel="C0BAD", files=files)
    text = answer(bot, "C0BAD").text
    assert line in text
    assert [decoded(p).size for p in image_parts(emu.requests[0])] == [(1056, 576)]
    assert "L1-L50 file incident.log" in text_of(emu.requests[0])
    assert "Read 1 image: good.png." in text


def test_metadata_is_stripped_and_a_photo_stays_jpeg(bot, emu):
    photo = screenshot(4000, 3000, "JPEG", exif=True)
    assert Image.open(io.BytesIO(photo)).getexif()  # the original carries EXIF (maker, GPS)
    files = [bot.slack.add_file("F0JPG", "phone.jpg", photo, "image/jpeg")]
    bot.mention("<@UTPUBOT> what is on this screen?", user=ALICE, channel="C0IMG4", files=files)
    answer(bot, "C0IMG4")
    [part] = image_parts(emu.requests[0])
    sent = decoded(part)
    assert sent.format == "JPEG" and sent.size == (912, 672)
    assert not sent.getexif() and "exif" not in sent.info and "icc_profile" not in sent.info


def test_without_a_model_the_answer_says_it_could_not_read_the_images(make_bot):
    bot = make_bot(poll_interval="0.2s", admins="UADMIN")
    files = [bot.slack.add_file("F0A", "a.png", screenshot(200, 100), "image/png"),
             bot.slack.add_file("F0B", "b.png", screenshot(100, 200), "image/png"),
             bot.slack.add_file("F0LOG", "incident.log", LOGS.encode())]
    bot.mention(MENTION, user=ALICE, channel="C0IMG5", files=files)
    text = answer(bot, "C0IMG5").text
    assert "I could not read the 2 images (a.png and b.png): reading images needs the model." in text
    assert "Log summary" in text and "first at L8" in text


# --- memory ------------------------------------------------------------------------------------


async def test_four_12_megapixel_images_are_read_one_at_a_time_in_bounded_memory(tmp_path):
    """Traced peak of the Python heap (tracemalloc, as tests/test_bounded_memory.py measures) while a
    mention's four 12 MP attachments (two PNG, two JPEG, 17 MiB) are downloaded, resized and put into
    the prompt. Pillow's pixel buffers are C allocations tracemalloc does not see: one decoded image
    at a time, 36 MB as RGB at most (a JPEG is decoded at a reduced DCT scale), is what they add."""
    from slack_sdk.web.async_client import AsyncWebClient

    from agent.llm.prompt import build_messages
    from handlers.mention_job import gather_input
    from infra.sandbox.slack_api import SlackApiSandbox
    from test_bounded_memory import MiB, traced

    slack = SlackApiSandbox()
    slack.start()
    try:
        bodies = [screenshot(4000, 3000, noise=500), screenshot(3000, 4000, noise=700),
                  screenshot(4000, 3000, "JPEG", noise=1000), screenshot(3000, 4000, "JPEG", noise=1300)]
        files = [slack.add_file(f"F0M{i}", f"big{i}.{'png' if i < 2 else 'jpg'}", body,
                                "image/png" if i < 2 else "image/jpeg") for i, body in enumerate(bodies)]
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        with traced() as peak:
            mention = await gather_input(client, channel="C0MEM", ts="1.000100", thread_ts="1.000100",
                                         text="<@UTPUBOT> compare these", files=files, bot_user_id="UTPUBOT")
            with mention:
                messages, _ = build_messages(mention, user_id="UALICE")
                sent = sum(len(image.data) for image in mention.images)
        assert [image.size for image in mention.images] == [(912, 672), (672, 912), (912, 672), (672, 912)]
        assert len(image_parts({"messages": messages})) == 4
        largest = max(len(body) for body in bodies)
        print(f"\nfour 12 MP images ({sum(map(len, bodies)) / MiB:.1f} MiB attached, largest {largest / MiB:.2f} MiB; "
              f"{sent / 1024:.0f} KiB sent): traced peak {peak() / MiB:.2f} MiB")
        # The downloads go to disk and Pillow reads them from there: the heap holds the resized copies
        # (and their data URIs), not the attachments; 4 MiB is less than the smaller of them.
        assert peak() < 4 * MiB < largest
    finally:
        slack.stop()


# --- MCP: ask_model with images ------------------------------------------------------------------


async def test_ask_model_over_mcp_shows_images_under_the_working_directory_and_names_the_rest(emu, redis_url,
                                                                                              tmp_path):
    from bot.mcp_server import call_tool
    from test_mcp_local import session_in
    from test_mcp_local import text_of as mcp_text

    root = tmp_path / "project"
    (root / "shots").mkdir(parents=True)
    (root / "shots" / "dash.png").write_bytes(screenshot(1920, 1080))
    (root / "shots" / "notes.png").write_text("not a picture\n")
    (tmp_path / "outside.png").write_bytes(screenshot(100, 100))
    emu.requests.clear()
    emu.images.clear()
    async with session_in(root, redis_url, gemma_base_url=emu.base_url,
                          vllm_limit_mm_per_prompt='{"image":2}') as session:
        result = await call_tool(session, "ask_model", {
            "prompt": "What does the dashboard show?", "max_tokens": 200,
            "images": ["shots/dash.png", "shots/notes.png", "../outside.png", "shots/dash.png", "shots/dash.png"]})
    text = mcp_text(result)
    assert not result.is_error, text
    assert "Read 2 images: shots/dash.png (1920×1080, sent as 1056×576), shots/dash.png (1920×1080, sent as " \
           "1056×576)." in text
    assert "Not read: shots/notes.png is not an image: its content is not PNG, JPEG, WebP, GIF or BMP." in text
    assert "Not read: ../outside.png is outside the working directory" in text
    assert "Not read: shots/dash.png: the model takes at most 2 images per prompt (--limit-mm-per-prompt)." in text
    assert [(i.width, i.height) for i in emu.images[-1]] == [(1056, 576), (1056, 576)]
    assert result.structured_content["images_read"] == ["shots/dash.png", "shots/dash.png"]


# --- tpubot shell: !attach ----------------------------------------------------------------------


@pytest.mark.e2e
def test_shell_attach_sends_a_screenshot_and_a_log_with_the_next_mention(tmp_path, redis_url):
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "dash.png").write_bytes(screenshot(1920, 1080))
    (tmp_path / "incident.log").write_text(LOGS + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "GEMMA_", "AGENT_"))}
    env["REDIS_URL"] = redis_url
    script = ("!attach dash.png\n!attach incident.log\n!attach ../elsewhere.png\n"
              "@tpubot what's wrong? see the logs\n\n")
    result = subprocess.run([str(Path(sys.executable).with_name("tpubot")), "shell"], input=script,
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "(attached dash.png, " in out and "image/png; it goes with your next @tpubot message)" in out
    assert "(not attached: ../elsewhere.png is outside the folder the shell was started in" in out
    reply = out[out.index("[thread] tpubot replied:"):]  # the answer (the 👍/👎 buttons follow it)
    assert "Read 1 image: dash.png." in reply and "It received 1 image (1056×576)" in reply
    assert "DEADLINE_EXCEEDED" in reply or "L8" in reply


# --- the README's claims ------------------------------------------------------------------------


def test_readme_image_figures_are_the_codes():
    """The README's "Screenshots in a mention" figures: the caps, the formats, the example size, the
    default limit; the behaviour behind each sentence is held by the tests above."""
    from pathlib import Path

    from bot.settings import Settings
    from infra.images import FORMATS, MAX_IMAGE_PIXELS, MAX_SOFT_TOKENS, PATCH_SIZE, POOLING_KERNEL, sent_size
    from infra.vllm_flags import image_limit

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Screenshots in a mention", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    assert f"at most {MAX_IMAGE_BYTES // (1024 * 1024)} MiB" in section
    assert f"more than {MAX_IMAGE_PIXELS // 1_000_000} megapixels" in section
    assert "PNG, JPEG, WebP, GIF and BMP" in section and len(FORMATS) == 5
    assert sent_size(1920, 1080) == (1056, 576) and "1920×1080 becomes 1056×576" in section
    assert f"{MAX_SOFT_TOKENS} soft tokens of {POOLING_KERNEL}×{POOLING_KERNEL} patches of {PATCH_SIZE} px" in section
    default = Settings.model_fields["vllm_limit_mm_per_prompt"].default
    assert f"({image_limit(default)} by default)" in section
    assert "`!attach FILE`" in readme and "!attach dash.png" in section


# --- logs ---------------------------------------------------------------------------------------


def test_a_data_uri_never_reaches_a_log_line_whatever_the_level():
    import logging

    from bot.logging_setup import configure_logging
    from infra.images import prepare_image

    uri = prepare_image("dash.png", screenshot(1920, 1080)).data_uri
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("openai").level)
    for log_format in ("json", "text"):
        stream = io.StringIO()
        configure_logging(logging.DEBUG, log_format=log_format, stream=stream)
        try:
            logging.getLogger("tpubot.test").warning("request body: %s", {"image_url": {"url": uri}})
            logging.getLogger("openai._base_client").debug("Request options: %s", uri)
        finally:
            root.handlers[:], root.level = saved[0], saved[1]
            logging.getLogger("openai").setLevel(saved[2])
        written = stream.getvalue()
        assert uri[40:80] not in written and f"data:image/png;base64,…[{len(uri):,} chars]" in written
        assert "Request options" not in written  # the openai client's request dumps stay off
