"""Tests of the tf layer."""
