"""The reading's form and checks, without a broker (tests/producers.rs runs these, and the
helper against a real broker)."""

import datetime as dt
import unittest

from sluice_producer import SensorProducer, reading


class ReadingTest(unittest.TestCase):
    def test_the_topics_form_with_the_time_it_was_taken(self):
        at = dt.datetime(2026, 11, 26, 5, 12, tzinfo=dt.timezone.utc)
        r = reading("gold", "row-count", {"count": 5}, date=dt.date(2026, 11, 26), hour=5, merge="add", timestamp=at)
        self.assertEqual(
            r,
            {"pipelineId": "gold", "key": "row-count", "data": {"count": 5}, "date": "2026-11-26",
             "hour": "05", "merge": "add", "timestamp": "2026-11-26T05:12:00+00:00"},
        )
        naive = reading("gold", "k", timestamp=dt.datetime(2026, 11, 26, 5, 12))
        self.assertEqual(naive["timestamp"], "2026-11-26T05:12:00+00:00", "naive is UTC")
        self.assertNotIn("date", reading("gold", "k"))

    def test_what_sluice_would_refuse_is_refused_here(self):
        for kwargs in ({"hour": 5}, {"date": "2026-11-26", "hour": 24}, {"date": "26/11/2026"},
                       {"date": "2026-11-26T05"}, {"merge": "sum"}):
            with self.assertRaises(ValueError, msg=kwargs):
                reading("gold", "k", **kwargs)
        with self.assertRaises(ValueError):
            reading("gold", " ")
        with self.assertRaises(ValueError):
            reading("", "k")

    def test_the_partitioner_is_sluices(self):
        with self.assertRaises(ValueError):
            SensorProducer("127.0.0.1:1", partitioner="consistent_random")


class RedirectTest(unittest.TestCase):
    def test_the_token_never_follows_a_redirect_to_another_host(self):
        import http.server
        import threading

        from sluice_producer import PublishError, post_readings

        seen = []

        class Elsewhere(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_GET

            def log_message(self, *args):
                pass

        other = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)

        class Redirecting(Elsewhere):
            def do_POST(self):
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{other.server_port}/collect")
                self.end_headers()

        api = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
        for server in (api, other):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with self.assertRaises(PublishError) as refused:
                post_readings(f"http://127.0.0.1:{api.server_port}", "s3cret-token", [reading("gold", "k")], timeout=5)
            self.assertIn("not followed", str(refused.exception))
            self.assertEqual(seen, [], "the redirect's target was asked, with the token")
        finally:
            for server in (api, other):
                server.shutdown()


if __name__ == "__main__":
    unittest.main()
