"""The plain maths the protocols are tested against."""
